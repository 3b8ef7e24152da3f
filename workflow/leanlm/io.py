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
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from leanlm.errors import OutputError

log = logging.getLogger(__name__)

# What a failed write most likely means, by errno, in words a person can act on.
_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


def write_error(path: str | os.PathLike, exc: OSError, what: str = "") -> OutputError:
    """A clear error for a failed write of ``path``: which path, why (full disk, read-only, permission)
    and what to do. ``what`` names the output for people (\"the checkpoint of step 400\")."""
    why = _WHY.get(exc.errno, exc.strerror or type(exc).__name__)
    failed = f" (at {exc.filename})" if exc.filename and os.fspath(exc.filename) != os.fspath(path) else ""
    error = OutputError(
        f"cannot write {what + ' ' if what else ''}{path}: {why}{failed} [{exc}]. Free disk space or make "
        f"{Path(path).parent} writable, then re-run"
    )
    error.errno, error.filename = exc.errno, os.fspath(path)
    return error


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
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


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
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.with_name(f".{target.name}.lock")  # left in place: removing it would race a waiter
    with open(lock, "a") as handle:
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
