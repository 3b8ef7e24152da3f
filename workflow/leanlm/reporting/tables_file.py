"""params/tables.yaml, the list of every table and figure the pipeline renders: read and checked here.

The Snakefile (before any job), ``leanlm validate`` and the render stages all read it through
:func:`load_tables`, so a mistake is refused once, naming the file and the item, before any training.

A renderer is a dotted path ``"package.module:function"`` that is imported when its table is rendered:
code chosen by a params file. So it must name a function of leanlm's own reporting package
(:data:`RENDERER_PACKAGE`) that is defined in the module's source (checked statically, without importing
it); ``renderer: "shutil:rmtree"`` or a module outside the package is refused. The same bound is applied
again where the path is imported (:class:`leanlm.registry.DottedRegistry`'s ``within``).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from leanlm.errors import ConfigError

KINDS = ("results", "params", "analytic")
RENDERER_PACKAGE = "leanlm.reporting"
_RENDERER = re.compile(r"^leanlm\.reporting(\.[A-Za-z_]\w*)+:[A-Za-z_]\w*$")
_NAMES = ("experiments", "optional", "families", "outputs", "inputs", "reads")
# What a results table may read besides its experiments' results (`reads`): the pretraining speed record.
READS = ("speed",)


def tables_path() -> Path:
    from leanlm import paths

    return paths.params_dir() / "tables.yaml"


def load_tables(path: str | Path | None = None) -> dict[str, dict]:
    """The items of params/tables.yaml (or ``path``), checked (:func:`check_tables`)."""
    path = Path(path) if path is not None else tables_path()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        raise ConfigError(f"{path} does not exist: it lists the tables and figures to render") from None
    return _load(str(path), stamp)


@lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> dict[str, dict]:
    from leanlm.io import read_yaml

    items = read_yaml(path)  # UTF-8, no repeated key; a syntax error names the file and line
    check_tables(items, Path(path))
    return items


def check_tables(items, path: Path) -> None:
    """ConfigError naming ``path`` and the item for anything the render stages could not use safely."""
    if not isinstance(items, dict) or not items:
        raise ConfigError(f"{path}: expected a mapping of table names to their settings")
    for name, spec in items.items():
        where = f"{path}: {name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a mapping (kind, renderer, outputs, ...), not {spec!r}")
        if spec.get("kind") not in KINDS:
            raise ConfigError(f"{where}: kind {spec.get('kind')!r} is none of {', '.join(KINDS)}")
        check_renderer(spec.get("renderer"), where)
        for key in _NAMES:
            value = spec.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
                raise ConfigError(f"{where}: {key} must be a list of names, not {value!r}")
        unknown = sorted(set(spec.get("reads", [])) - set(READS))
        if unknown:
            raise ConfigError(f"{where}: reads {unknown}, which no rule makes; known: {', '.join(READS)}")
        if not spec.get("outputs"):
            raise ConfigError(f"{where}: names no outputs (tex, csv, pdf, png)")
        if spec["kind"] == "results" and not spec.get("experiments"):
            raise ConfigError(f"{where}: a results table names the experiments it reads (experiments: [...])")


def check_renderer(target, where: str) -> None:
    """``target`` names a function defined in a module of leanlm's reporting package (read, not imported)."""
    if not isinstance(target, str) or not _RENDERER.match(target):
        raise ConfigError(f"{where}: renderer {target!r} must be a function of leanlm's reporting package, "
                          f"written \"{RENDERER_PACKAGE}.<module>:<function>\" (a renderer is imported and run, so "
                          f"a params file may not name code elsewhere)")
    module, _, attr = target.partition(":")
    source = _module_source(module)
    if source is None:
        raise ConfigError(f"{where}: renderer {target!r}: module {module} does not exist")
    if attr not in _top_level_names(source):
        raise ConfigError(f"{where}: renderer {target!r}: module {module} ({source}) defines no {attr!r}")


def _module_source(module: str) -> Path | None:
    from leanlm.provenance import _module_file

    return _module_file(module)


@lru_cache(maxsize=None)
def _top_level_names(source: Path) -> frozenset[str]:
    """Names a module binds at its top level: functions, classes, assignments and imports."""
    names = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)

