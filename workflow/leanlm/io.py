"""Atomic file writes: a killed job never leaves a half-written output behind.

Everything is written to a temporary file in the destination directory and moved into place with
``os.replace``, which is atomic on POSIX file systems. :func:`build_once` adds an inter-process lock
for caches that several jobs may want at the same moment (a token stream of billions of tokens is
worth building once, not once per concurrent pretraining job).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

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



def build_once(target: str | os.PathLike, build: Callable[[], Any], what: str = "",
               done: Callable[[], bool] | None = None) -> bool:
    """Make sure ``target`` exists, calling ``build()`` (which must create it, atomically) at most
    once across the processes that share the file system; returns whether this call built it.

    The first process to need a missing target takes an exclusive ``flock`` on ``.<target name>.lock``;
    others block on it (saying whom they wait for) and find the target made when it is released. A
    process killed while building releases the lock with its death, and the next one builds anew (the
    atomic write left nothing half-made). flock is per host on some network file systems: jobs on
    different cluster nodes may then both build, which is safe, only slower. ``done`` says whether the
    target is complete (default: it exists), for targets made of more than one file.
    """
    target = Path(target)
    done = done or target.exists
    if done():
        return False
    lock = target.with_name(f".{target.name}.lock")  # left in place: removing it would race a waiter
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")
    except OSError as exc:
        if paths.in_cache(target):  # most targets are caches: the error names the variable that chose the folder
            raise cache_error(target.parent, exc) from exc
        raise write_error(target.parent, exc) from exc
    with handle:
        locked = _flock(handle, lock, what or target.name)
        try:
            if done():  # built by the process we waited for
                return False
            build()
            if not done():
                raise RuntimeError(f"building {target} did not create it")
            return True
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


# flock is missing on some network file systems (NFS without lockd, some FUSE mounts): there a build goes
# on without the lock, which is safe (the write is atomic), only possibly done twice.
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _flock(handle, lock: Path, building: str) -> bool:
    """Take the exclusive lock on ``handle``, waiting for its holder; False where the file system has no
    flock (then nothing is locked)."""
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building %s (lock %s)", building, lock)
            fcntl.flock(handle, fcntl.LOCK_EX)
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            raise
        log.warning("%s: the file system does not support flock (%s); going on without the lock", lock,
                    exc.strerror)
        return False
    return True


# ----------------------------------------------------------------------------- scratch folders
# A staged write works in hidden folders beside its output, named for their owner: ``.<name>.partial-<host>-<pid>``
# (the output being made) and ``.<name>.old-<host>-<pid>`` (the output it replaces, removed last), and holds an
# flock on its lock file ``.<name>.lock-<host>-<pid>`` from before the first is made until after the last is gone.
# A process killed with SIGKILL (or a machine that went down) leaves them, corpus-sized at paper scale; the next
# staged write of the same name removes those whose owner is dead, by this rule:
#
# - only this host's: a process on another host that shares the file system cannot be checked from here (and
#   flock may be per host there), so its folders are left, with a warning naming them;
# - the owner is dead when its lock can be taken: the kernel releases a flock with its process, so a pid that
#   now belongs to another process (pid reuse) does not keep a dead owner's folders;
# - without the lock file, or on a file system without flock, the owner is dead when its pid runs no process;
#   a pid that runs is taken for the owner (a leftover is better than deleting a live write).
#
# Folders named by older leanlm versions (``.<name>.partial-<pid>``, no host) are left, with a warning.


def _owner_tag() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@contextlib.contextmanager
def scratch_dir(parent: str | os.PathLike, stem: str) -> Iterator[Path]:
    """Yield an empty hidden folder ``parent/.<stem>.partial-<host>-<pid>``, removed when the block ends (also
    on an exception); one a killed process left is removed by the next ``scratch_dir`` or :func:`staged_dir`
    of ``stem`` in ``parent`` (the rule above)."""
    parent = Path(parent)
    with _owned(parent, stem) as tag:
        folder = parent / f".{stem}.partial-{tag}"
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield an empty hidden folder beside ``final``; on success it replaces ``final`` as a whole. Work left
    by a killed earlier write of ``final`` is removed first (:func:`scratch_dir`)."""
    final = Path(final)
    with scratch_dir(final.parent, final.name) as tmp:
        yield tmp
        old = final.parent / f".{final.name}.old-{_owner_tag()}"
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _owned(parent: Path, stem: str) -> Iterator[str]:
    """Hold this process's lock on ``stem``'s scratch in ``parent`` for the block, after removing the stale
    scratch of dead owners; yields the owner tag (``<host>-<pid>``). The lock file is removed last."""
    tag = _owner_tag()
    try:
        parent.mkdir(parents=True, exist_ok=True)
        handle = open(parent / f".{stem}.lock-{tag}", "a")
    except OSError as exc:
        raise write_error(parent / stem, exc) from exc
    with handle:
        locked = _flock(handle, Path(handle.name), stem)
        try:
            _remove_stale(parent, stem, tag)
            yield tag
        finally:
            Path(handle.name).unlink(missing_ok=True)  # while holding it: a cleaner never sees it free and present
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_stale(parent: Path, stem: str, mine: str) -> None:
    """Remove the scratch of ``stem`` in ``parent`` whose owner is dead (the rule above); this process's own
    tag's leftovers too (it holds that lock, so they are an earlier process's with the same pid)."""
    pattern = re.compile(rf"\.{re.escape(stem)}\.(partial|old|lock)-(.+)-(\d+)")
    legacy = re.compile(rf"\.{re.escape(stem)}\.(partial|old)-\d+")
    owners: dict[tuple[str, int], list[Path]] = {}
    for path in parent.glob(f".{glob.escape(stem)}.*"):
        if match := pattern.fullmatch(path.name):
            owners.setdefault((match[2], int(match[3])), []).append(path)
        elif legacy.fullmatch(path.name):
            log.warning("%s: left by an older leanlm, which named no host; remove it if no job is writing it", path)
    host = socket.gethostname()
    for (owner_host, pid), found in owners.items():
        if f"{owner_host}-{pid}" == mine:
            _remove(p for p in found if ".lock-" not in p.name)
        elif owner_host != host:
            log.warning("%s: scratch of a process on host %s, which cannot be checked from here; remove it if no "
                        "job there is writing it", ", ".join(map(str, found)), owner_host)
        else:
            _remove_if_dead(parent / f".{stem}.lock-{owner_host}-{pid}", pid, found)


def _remove_if_dead(lock: Path, pid: int, found: list[Path]) -> None:
    try:
        handle = open(lock)  # not "a": a vanished lock file must not be made again
    except FileNotFoundError:
        if not _pid_runs(pid):
            _remove(found)
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # the owner is alive and holds it
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise
            if not _pid_runs(pid):
                _remove(found)
            return
        _remove(found)  # the lock was free: its owner is dead, whoever has its pid now


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove(paths: Iterator[Path] | list[Path]) -> None:
    """Remove folders first, lock files last (a lock file present means its folders may still be there)."""
    for path in sorted(paths, key=lambda p: ".lock-" in p.name):
        log.info("removing %s, left by a process that was killed", path)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except FileNotFoundError:
            pass  # another process cleaning the same leftovers was first
        except OSError as exc:  # e.g. another user's, in a shared temporary folder: not this job's to fail on
            log.warning("cannot remove %s (%s); remove it by hand", path, reason(exc))
