"""Atomic file writes: a killed job never leaves a half-written output behind.

Everything is written to a temporary file in the destination directory and moved into place with
``os.replace``, which is atomic on POSIX file systems. Reading: JSON lines, and YAML safely with
duplicate keys refused. Builds shared between processes (a lock) and scratch folders are
:mod:`leanlm.scratch`'s.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from leanlm import paths
from leanlm.errors import OutputError

log = logging.getLogger(__name__)

# What a failed write most likely means, by errno, in words a person can act on.
_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "it is a file, not a folder",
}


def reason(exc: OSError) -> str:
    """Why an operation on a file failed, in words a person can act on."""
    return _WHY.get(exc.errno, exc.strerror or type(exc).__name__)


def write_error(path: str | os.PathLike, exc: OSError, what: str = "") -> OutputError:
    """A clear error for a failed write of ``path``: which path, why (full disk, read-only, permission)
    and what to do. ``what`` names the output for people (\"the checkpoint of step 400\")."""
    why = reason(exc)
    failed = f" (at {exc.filename})" if exc.filename and os.fspath(exc.filename) != os.fspath(path) else ""
    error = OutputError(
        f"cannot write {what + ' ' if what else ''}{path}: {why}{failed} [{exc}]. Free disk space or make "
        f"{Path(path).parent} writable, then re-run"
    )
    error.errno, error.filename = exc.errno, os.fspath(path)
    return error


def cache_error(folder: str | os.PathLike, exc: OSError) -> OutputError:
    """The error for a cache folder (:func:`leanlm.paths.cache_dir`) that cannot be made or written: the
    folder, the variable that chose the cache, why (a file, not a folder; read-only; ...) and what to do."""
    if os.environ.get("LEANLM_CACHE"):
        chosen = f"LEANLM_CACHE={os.environ['LEANLM_CACHE']}"
    else:
        chosen = f"LEANLM_CACHE unset: {paths.cache_dir()}, under XDG_CACHE_HOME or ~/.cache"
    error = OutputError(f"cannot use the cache folder {folder} ({chosen}): {reason(exc)}. "
                        f"Set LEANLM_CACHE to a writable folder, then re-run")
    error.errno, error.filename = exc.errno, os.fspath(folder)
    return error


def writable_cache_dir(sub: str) -> Path:
    """``cache_dir()/sub``, created and proven writable; :func:`cache_error` when it cannot be (LEANLM_CACHE
    a file, or on a read-only file system)."""
    folder = paths.cache_dir() / sub
    try:
        return check_writable(folder)
    except OutputError as exc:
        raise cache_error(folder, exc) from None


def check_writable(directory: str | os.PathLike, what: str = "") -> Path:
    """Create ``directory`` if needed and prove a file can be made in it, before hours of work whose
    output would land there; raises :class:`OutputError` naming it otherwise."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise write_error(directory, exc, what) from exc
    return directory


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    Use it for writers that want a file name (``torch.save``, ``safetensors``, ``df.to_csv``). An
    ``OSError`` of the write (full or read-only disk, permissions) becomes an :class:`OutputError` naming
    ``path`` and the reason.
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix or ".tmp", dir=dest.parent)
    except OSError as exc:
        raise write_error(dest, exc) from exc
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600, and some writers (safetensors) recreate the file: give the result the
        # permissions a plain open() would (umask applied), so the group can read shared outputs.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, dest)
    except BaseException as exc:
        tmp_path.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise write_error(dest, exc) from exc
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def json_text(obj: Any) -> str:
    """``obj`` as the indented, key-sorted JSON text :func:`write_json` writes."""
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON atomically (stable diffs, stable hashes)."""
    return write_text(path, json_text(obj))


def write_jsonl(path: str | os.PathLike, rows) -> Path:
    """Write an iterable of dicts as JSON lines atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
    return Path(path)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike) -> Iterator[Any]:
    """The JSON values of a JSON-lines file, one per non-blank line, streamed. A line that is not UTF-8
    or not JSON raises :class:`~leanlm.errors.DataError` naming the file and the line (a damaged corpus
    or task split would otherwise stop a job with a bare decoder traceback)."""
    from leanlm.errors import DataError

    with open(path, "rb") as fh:  # bytes, decoded line by line, so that a bad byte has a line number
        for number, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
                if line.strip():
                    yield json.loads(line)
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}, line {number}: not UTF-8 (byte {raw[exc.start]:#04x} at column "
                                f"{exc.start + 1}); the file is damaged: prepare it again (`dvc repro` or "
                                f"`dvc checkout`)") from None
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}, line {number}: not a JSON value ({exc.msg} at column {exc.colno}); "
                                f"the file is damaged: prepare it again (`dvc repro` or `dvc checkout`)") from None


def _json_default(obj: Any) -> Any:
    # numpy / torch scalars and paths show up in metrics; turn them into plain JSON values.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` through libyaml's C loader where PyYAML has it: every job parses the profile
    and the experiment files at start-up, and the pure-Python loader spent ~0.5 s of it."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_yaml(path: str | os.PathLike) -> Any:
    """Load one of the project's own YAML files (a profile, an experiment file, a task table), stricter
    than :func:`load_yaml`: the file must be UTF-8 and no mapping may repeat a key (YAML keeps the last
    one silently, so a pasted block would overwrite a setting unseen). Either fault, and any YAML syntax
    error, raises :class:`~leanlm.errors.ConfigError` naming the file and the line."""
    import yaml

    from leanlm.errors import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}, line {line}: not UTF-8 text (byte {data[exc.start]:#04x} at offset "
                          f"{exc.start}); save the file as UTF-8") from None
    try:
        return yaml.load(text, Loader=_unique_key_loader())
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}, line {exc.line}: key {exc.key!r} appears twice in one mapping (first at line "
                          f"{exc.first}); YAML would keep only the last value: remove one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML: {exc}") from None


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first: int):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


_LOADERS: dict[str, type] = {}


def _unique_key_loader() -> type:
    """libyaml's safe loader (as :func:`load_yaml`) whose mappings refuse a repeated key. Keys that a
    merge (``<<: *anchor``) brings in may be overridden, as YAML intends; only keys written twice count."""
    if "loader" not in _LOADERS:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
            def construct_mapping(self, node, deep=False):
                if isinstance(node, yaml.MappingNode):
                    seen: dict[Any, int] = {}
                    for key_node, _ in node.value:
                        if key_node.tag == "tag:yaml.org,2002:merge":
                            continue
                        key = self.construct_object(key_node, deep=True)
                        try:
                            if key in seen:
                                raise _DuplicateKey(key, key_node.start_mark.line + 1, seen[key])
                            seen[key] = key_node.start_mark.line + 1
                        except TypeError:  # an unhashable key: the base class says so
                            continue
                return super().construct_mapping(node, deep=deep)

        _LOADERS["loader"] = UniqueKeyLoader
    return _LOADERS["loader"]


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB blocks (wheels, corpus splits of many GB)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
