"""Work shared between processes on one file system: build a cache once, and scratch folders a killed
process leaves behind removed by the next one.

:func:`build_once` takes an inter-process lock for caches that several jobs may want at the same moment (a
token stream of billions of tokens is worth building once, not once per concurrent pretraining job);
:func:`scratch_dir` and :func:`staged_dir` give a process its own hidden folder, owned by its host and pid,
removed at the end of the block or, after a kill, by the next process that writes the same thing. The
writes themselves are atomic (:mod:`leanlm.io`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import logging
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any, Callable, Iterator

from leanlm import paths
from leanlm.io import cache_error, reason, write_error

log = logging.getLogger(__name__)


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
