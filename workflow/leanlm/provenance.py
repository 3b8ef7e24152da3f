"""What produced a result: a content hash of the code, and the hardware it ran on.

Snakemake does not track imported modules, so rules carry a hash of the code their job runs in their
``params``. :func:`code_of` hashes exactly that: the modules a job runs (its stage's core module and the
plug-in its run names by dotted path: objective, runner, table renderer) and every leanlm module they
import, read statically from the sources (:func:`import_closure`). So editing one fine-tuning runner
reruns only the fine-tuning jobs that use it, and editing a chapter-2 renderer only chapter 2's tables.
:func:`code_version` hashes whole subpackages (the data stages, which DVC tracks by folder too).
Content hashes (not file times) so a fresh ``git clone`` or ``dvc checkout`` does not look like a change.

Planning asks for several hundred fingerprints whose closures overlap almost wholly, so each file's
place (:func:`_module_file`), imports and bytes are read once per process and each fingerprint is computed
once per set of modules: every cache is keyed on, or checked against, the files' size and time, so a file
edited while the process lives is read again (tests edit a variant and ask again).
"""

from __future__ import annotations

import ast
import hashlib
import platform
import re
from functools import lru_cache
from pathlib import Path

from leanlm.memo import disk_memo

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE = PACKAGE_DIR.name
# A string constant naming a leanlm module ("leanlm.evaluation.squad", "leanlm.cli:main"): modules loaded
# by name (a registry's module list, a dotted path) are dependencies as much as imported ones.
_DOTTED = re.compile(rf"^{PACKAGE}(\.\w+)*(:\w+)?$")


def code_version(*subpackages: str) -> str:
    """SHA-256 (first 16 hex digits) over the sources of the named subpackages / modules of leanlm."""
    digest = hashlib.sha256()
    for name in sorted(subpackages):
        target = PACKAGE_DIR / name
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]
        for path in files:
            digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# (package folder, module) -> the module's source file, checked to exist again at each use (_stamp). Keyed by
# the folder too, so that fingerprinting another copy of the sources (PACKAGE_DIR set by a test) never
# returns this copy's files.
_FOUND: dict[tuple[Path, str], Path] = {}


def _module_file(module: str) -> Path | None:
    """The source file of leanlm module ``module`` (a package's ``__init__.py``), None if there is none."""
    key = (PACKAGE_DIR, module)
    if key in _FOUND:
        return _FOUND[key]
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            _FOUND[key] = path
            return path
    return None


def _stamp(module: str) -> tuple[Path, int, int] | None:
    """``module``'s file with its modification time and size (None if it has none now): what the caches
    below are keyed on. A file found earlier but since removed is looked up again."""
    path = _module_file(module)
    if path is None:
        return None
    try:
        stat = path.stat()
    except FileNotFoundError:
        _FOUND.pop((PACKAGE_DIR, module), None)
        path = _module_file(module)
        if path is None:
            return None
        stat = path.stat()
    return path, stat.st_mtime_ns, stat.st_size


def _nearest_module(name: str) -> str | None:
    """``name`` or its longest prefix that is a leanlm module (``leanlm.io.write_json`` -> ``leanlm.io``)."""
    while name and _module_file(name) is None:
        name = name.rpartition(".")[0]
    return name or None


@lru_cache(maxsize=None)
def _direct_imports(module: str, mtime_ns: int) -> frozenset[str]:
    """The leanlm modules ``module``'s source imports anywhere (top level or inside functions) or names in
    a string constant, and the packages above it (importing a module runs their ``__init__``)."""
    path = _module_file(module)
    stat = path.stat()
    found = set(_named_in(module, path, stat.st_mtime_ns, stat.st_size))
    parts = module.split(".")
    found.update(".".join(parts[:i]) for i in range(1, len(parts)))
    resolved = {_nearest_module(name) for name in found}
    return frozenset(m for m in resolved if m and m != module)


def _named_in(module: str, path: Path, mtime_ns: int, size: int) -> list[str]:
    """What ``module``'s source imports or names (dotted names, not yet resolved to modules): from the
    on-disk memo (leanlm.memo: parsing ~250 sources took a good part of each `snakemake` call's planning)
    when the file still has the time and size it was read at, else parsed and remembered."""
    memo = disk_memo(PACKAGE_DIR, "leanlm-provenance-imports.json")
    key = str(path.relative_to(PACKAGE_DIR))
    entry = memo.entries.get(key)
    if entry and entry[0] == mtime_ns and entry[1] == size:
        return entry[2]
    names = sorted(_parse_names(module, path))
    memo.entries[key] = [mtime_ns, size, names]
    memo.changed()
    return names


def _parse_names(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules imported by name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.match(node.value):
            found.add(node.value.partition(":")[0])
    return found


def _closure_stamps(modules: tuple[str, ...]) -> list[tuple[Path, int, int]]:
    """The stamps (:func:`_stamp`) of ``modules`` and of every leanlm module they import, directly or not."""
    todo = [m.partition(":")[0] for m in modules]
    seen: dict[str, tuple[Path, int, int]] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        stamp = _stamp(module)
        if stamp is None:
            raise ValueError(f"code fingerprint: {module!r} is no module of {PACKAGE} ({PACKAGE_DIR})")
        seen[module] = stamp
        todo.extend(_direct_imports(module, stamp[1]))
    return sorted(seen.values())


def import_closure(*modules: str) -> list[Path]:
    """Source files of the leanlm ``modules`` (dotted names; ``"module:attr"`` is read as its module) and of
    every leanlm module they import, directly or not: the code a job that runs them can execute."""
    return [path for path, _, _ in _closure_stamps(modules)]


@lru_cache(maxsize=None)
def _source(path: Path, mtime_ns: int, size: int) -> bytes:
    return path.read_bytes()


@lru_cache(maxsize=None)
def _digest(stamps: tuple[tuple[Path, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for path, mtime_ns, size in stamps:
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
        digest.update(_source(path, mtime_ns, size))
    return digest.hexdigest()[:16]


# (package folder, modules) -> their closure's stamps when last asked (the folder: as _FOUND's key says)
_LAST: dict[tuple[Path, tuple[str, ...]], list[tuple[Path, int, int]]] = {}


def _fresh(stamps: list[tuple[Path, int, int]]) -> bool:
    """Whether every file of a closure found earlier still has its size and time (its imports, so the
    closure itself, are then unchanged too)."""
    try:
        return all((s := path.stat()).st_mtime_ns == mtime_ns and s.st_size == size for path, mtime_ns, size in stamps)
    except FileNotFoundError:
        return False


def code_of(*modules: str) -> str:
    """SHA-256 (first 16 hex digits) over :func:`import_closure` of ``modules``: what one job runs (each file's
    path in the package, then its bytes, in path order)."""
    key = (PACKAGE_DIR, modules)
    stamps = _LAST.get(key)
    if stamps is None or not _fresh(stamps):
        stamps = _LAST[key] = _closure_stamps(modules)
    return _digest(tuple(stamps))


def hardware() -> str:
    """A one-line description of the device a job ran on, for captions (e.g. Table 2.3's timings)."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return f"{torch.cuda.device_count()} x {name} (CUDA {torch.version.cuda})"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {cpu}, {torch.get_num_threads()} threads"
