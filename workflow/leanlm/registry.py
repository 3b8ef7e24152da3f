"""Name -> class registries, so a variant is chosen by the name the thesis uses.

Adding a variant means writing one class and decorating it with ``@REGISTRY.register("name")`` (the
model library's own variants, defined where they are registered). Plug-ins outside the core (pretraining
objectives, fine-tuning runners, chapter tables and figures) register by dotted path instead
(:class:`DottedRegistry`, :class:`FolderRegistry`): nothing is imported for its side effects.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from leanlm.errors import ConfigError

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
        return self._targets()

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

    def __init__(self, kind: str, package: str, attr: str):
        self.package, self.attr = package, attr
        super().__init__(kind, self._folder_targets, within=package)

    def folder(self):
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"{self.kind}: plug-in package {self.package} does not exist")
        return Path(list(spec.submodule_search_locations)[0])

    def _folder_targets(self) -> dict[str, str]:
        return {path.stem: f"{self.package}.{path.stem}:{self.attr}"
                for path in sorted(self.folder().glob("*.py")) if not path.name.startswith("_")}
