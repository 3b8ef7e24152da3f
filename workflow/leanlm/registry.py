"""Name -> class registries, so a variant is chosen by the name the thesis uses.

Nothing is imported for its side effects: a name maps to a dotted path, resolved when it is asked for.
Plug-ins outside the core (pretraining objectives, fine-tuning runners, chapter tables and figures) are
:class:`FolderRegistry` folders (a file is a name) or :class:`DottedRegistry` data (params/tables.yaml).
The model library's variants (ch. 3 attention, ch. 4 token mixers, word embeddings) are
:class:`VariantRegistry` folders: a module declares its variants with ``@REGISTRY.register("name")`` on
top-level classes, read from the source, so listing the names imports no variant and a job imports (and
its code fingerprint holds) only the variants it builds. :class:`Registry` is the eager form (models).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Callable, Generic, TypeVar

from leanlm.errors import ConfigError
from leanlm.fixed_files import once

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._items))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items


def resolve(target: str, what: str, within: str = "leanlm"):
    """The object a dotted path ``"package.module:attr"`` names, imported now (lm-eval's lazy registry).

    A module or attribute that does not exist fails loudly with ``what`` (the registered name and where it
    was registered), never by skipping: a missed rename must not silently drop a plug-in. The module must
    lie in the package ``within``: a dotted path can come from a params file, and importing it runs code.
    """
    import importlib

    module, sep, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not sep or not module or not attr:
        raise ConfigError(f"{what}: {target!r} is not a dotted path of the form 'package.module:attr'")
    if module != within and not module.startswith(within + "."):
        raise ConfigError(f"{what}: {target!r} is outside {within}; a plug-in must be one of its modules")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and (module == err.name or module.startswith(err.name + ".")):
            raise ConfigError(f"{what}: module {module} (of {target!r}) does not exist") from None
        raise
    try:
        return getattr(loaded, attr)
    except AttributeError:
        raise ConfigError(f"{what}: module {module} has no {attr!r} (of {target!r})") from None


class DottedRegistry(Generic[T]):
    """Name -> ``"package.module:attr"``, resolved lazily: nothing is imported to register a plug-in.

    ``targets`` returns the mapping (read when asked, so a registry can be defined by data, e.g.
    params/tables.yaml, or by a folder, :class:`FolderRegistry`).
    """

    def __init__(self, kind: str, targets: Callable[[], dict[str, str]], within: str = "leanlm"):
        self.kind = kind
        self._targets = targets
        self.within = within  # the package every target must lie in (resolve)

    def targets(self) -> dict[str, str]:
        # read once per pass over unchanging files (a profile's checks ask ~1,000 times: leanlm.fixed_files)
        return once(("registry", self), self._targets)  # the registry itself: no id reused after it is dropped

    def target(self, name: str) -> str:
        targets = self.targets()
        try:
            return targets[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(targets))}") from None

    def get(self, name: str) -> T:
        return resolve(self.target(name), f"{self.kind} {name!r}", self.within)

    def names(self) -> list[str]:
        return sorted(self.targets())

    def __contains__(self, name: str) -> bool:
        return name in self.targets()


class FolderRegistry(DottedRegistry[T]):
    """A folder is the registry and a file is the registered name: module ``package.<name>`` holds the
    plug-in as ``attr`` (a new objective or runner is one new file; no existing file changes)."""

    def __init__(self, kind: str, package: str, attr: str, helpers: str | None = None):
        self.package, self.attr = package, attr
        self.helpers = helpers  # a glob of the folder's modules that are a plug-in's helpers, not plug-ins
        super().__init__(kind, self._folder_targets, within=package)

    def folder(self):
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{self.kind}: plug-in package {self.package} does not exist")
        return Path(list(spec.submodule_search_locations)[0])

    def _folder_targets(self) -> dict[str, str]:
        from fnmatch import fnmatch

        return {stem: f"{self.package}.{stem}:{self.attr}" for stem in _module_stems(self.folder(), "*.py")
                if not (self.helpers and fnmatch(stem, self.helpers))}


def _module_stems(folder: Path, pattern: str) -> tuple[str, ...]:
    """The plug-in modules of ``folder`` (files matching ``pattern``, not starting with ``_``), listed once
    while the folder is unchanged (a file added or removed changes its time): planning asks ~1,000 times."""
    return _listing(str(folder), folder.stat().st_mtime_ns, pattern)


@lru_cache(maxsize=None)
def _listing(folder: str, mtime_ns: int, pattern: str) -> tuple[str, ...]:
    return tuple(p.stem for p in sorted(Path(folder).glob(pattern)) if not p.name.startswith("_"))


@lru_cache(maxsize=None)
def _declared(path: str, mtime_ns: int, decorator: str) -> tuple[tuple[str, str], ...]:
    """``(name, class)`` of each top-level class of file ``path`` decorated ``@<decorator>.register("name")``."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for deco in node.decorator_list:
            if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "register"
                    and isinstance(deco.func.value, ast.Name) and deco.func.value.id == decorator):
                if len(deco.args) != 1 or not isinstance(deco.args[0], ast.Constant) or not isinstance(
                        deco.args[0].value, str):
                    raise ConfigError(f"{path}:{deco.lineno}: {decorator}.register takes the variant's name as "
                                      f"one string literal (it is read from the source, not run)")
                found.append((deco.args[0].value, node.name))
    return tuple(found)


class VariantRegistry(DottedRegistry[T]):
    """A folder of variant modules: each module file (``pattern``; names starting with ``_`` are shared code,
    not variants) declares its variants with ``@<decorator>.register("name")`` on top-level classes.

    The names are read from the sources (no import), so ``names()`` and ``name in REGISTRY`` load nothing and
    ``get(name)`` imports that one module. A new variant is one new file in the folder; a name declared twice
    is an error naming both files. The decorator itself only stamps ``variant_name`` on the class.
    """

    def __init__(self, kind: str, package: str, decorator: str, pattern: str = "*.py"):
        self.package, self.decorator, self.pattern = package, decorator, pattern
        super().__init__(kind, self._declared_targets, within=package)

    def register(self, name: str) -> Callable[[T], T]:
        def deco(cls: T) -> T:
            cls.variant_name = name
            return cls

        return deco

    def folder(self) -> Path:
        import importlib.util

        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{self.kind}: variant package {self.package} does not exist")
        return Path(list(spec.submodule_search_locations)[0])

    def _declared_targets(self) -> dict[str, str]:
        targets: dict[str, str] = {}
        folder = self.folder()
        for stem in _module_stems(folder, self.pattern):
            path = folder / f"{stem}.py"
            for name, cls in _declared(str(path), path.stat().st_mtime_ns, self.decorator):
                target = f"{self.package}.{path.stem}:{cls}"
                if name in targets:
                    raise ConfigError(f"{self.kind} {name!r} is declared twice: {targets[name]} and {target}")
                targets[name] = target
        return targets

    def module_of(self, name: str) -> str:
        """The dotted module that defines variant ``name`` (ConfigError if unknown): what a job runs."""
        return self.target(name).partition(":")[0]

    def declared(self, name: str, attribute: str):
        """The literal value variant ``name``'s class gives ``attribute`` (in its body, else in a base class's,
        followed through the sources), read without importing anything: what planning may ask of a variant
        (e.g. a mixer's ``qk_stream``) without the model library. ConfigError where it is not a literal."""
        module, _, cls = self.target(name).partition(":")
        found = _class_attribute(module, cls, attribute, set())
        if found is _ABSENT:
            raise ConfigError(f"{self.kind} {name!r}: {module}.{cls} sets no literal {attribute!r} in its class or "
                              f"its bases' (it is read from the sources, not run)")
        return found


_ABSENT = object()


@lru_cache(maxsize=None)
def _parsed(path: str, mtime_ns: int) -> ast.Module:
    """A source file's syntax tree, parsed once while the file is unchanged."""
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def _class_attribute(module: str, cls: str, attribute: str, seen: set):
    """``attribute``'s literal value in class ``cls`` of leanlm module ``module``, else in its bases (defined
    in that module or imported into it by ``from X import Base``), from the sources; _ABSENT if none."""
    if (module, cls) in seen or not module.startswith("leanlm."):
        return _ABSENT
    seen.add((module, cls))
    # The file from the module's name (importlib's find_spec would import the parent packages, and with them
    # torch): leanlm's sources lie beside this file.
    base = Path(__file__).resolve().parent.joinpath(*module.split(".")[1:])
    source = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if source is None:
        return _ABSENT
    tree = _parsed(str(source), source.stat().st_mtime_ns)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:
        return _ABSENT
    for item in node.body:
        targets = item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(item, ast.AnnAssign) \
            and item.value is not None else []
        if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
            try:
                return ast.literal_eval(item.value)
            except ValueError:
                return _ABSENT
    imported = {alias.asname or alias.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom)
                and n.module and n.level == 0 for alias in n.names}
    for base in node.bases:
        if isinstance(base, ast.Name):
            found = _class_attribute(imported.get(base.id, module), base.id, attribute, seen)
            if found is not _ABSENT:
                return found
    return _ABSENT
