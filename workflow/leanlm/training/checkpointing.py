"""Training checkpoints that are never half-written.

A checkpoint is the folder ``<run_dir>/checkpoint/`` holding ``state.pt`` (one ``torch.save`` of
everything the engine needs to go on: model, optimizer, step, RNG states, best metric/state, history)
and ``meta.json`` (the step and time, for people). Saving writes a fresh folder beside it and swaps
the two with renames, so at every instant there is either the old complete checkpoint or the new one:

1. write ``.checkpoint.partial/`` (removed again if anything fails);
2. rename ``checkpoint/`` to ``.checkpoint.previous/``;
3. rename ``.checkpoint.partial/`` to ``checkpoint/``;
4. delete ``.checkpoint.previous/``.

A kill between 2 and 3 leaves only ``.checkpoint.previous/``; ``load_checkpoint`` puts it back.
``meta.json`` records the SHA-256 of ``state.pt`` as written; ``load_checkpoint`` checks it before
unpickling, so a file damaged on disk (bit rot, a bad copy) is refused by name instead of resuming
into NaNs. States are loaded with ``weights_only=True``: a checkpoint is data, never code.

:func:`run_lock` keeps two jobs from training the same run at once (they would race on
``.checkpoint.partial/``): the second fails at once, naming the process that holds the run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from leanlm.errors import TrainingError
from leanlm.io import sha256_file
from leanlm.training.train_config import _RUN_DEFINING

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "state.pt"
META_FILE = "meta.json"
FORMAT_VERSION = 1
_PARTIAL = ".checkpoint.partial"
_PREVIOUS = ".checkpoint.previous"


@dataclass
class TrainingState:
    """How far a run has got: everything a checkpoint holds besides model, optimizer and RNG states.

    Steps count completed optimizer updates. ``losses[s]`` is the loss of 0-based step ``s`` (kept for
    every step so log windows and the last-10% mean are exact after a resume).
    """

    losses: torch.Tensor
    step: int = 0
    tokens: int = 0
    train_seconds: float = 0.0
    history: list = field(default_factory=list)
    best_metric: float | None = None
    best_step: int | None = None
    best_state: dict | None = None  # CPU copy of the best evaluation's model state
    bad_evals: int = 0  # evaluations in a row without improvement
    stopped: bool = False  # early stopping fired
    last_log_step: int = 0
    last_eval_step: int | None = None

    @classmethod
    def fresh(cls, total_steps: int) -> "TrainingState":
        return cls(losses=torch.zeros(total_steps, dtype=torch.float64))

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # shallow: no tensor copies

    @classmethod
    def from_dict(cls, state: dict) -> "TrainingState":
        """Raises ``KeyError`` naming the first missing entry."""
        return cls(**{f.name: state[f.name] for f in fields(cls)})


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def _write_state(state: dict, path: Path) -> None:
    """The one place bytes of the state are written (tests replace it to simulate a failing disk)."""
    torch.save(state, path)


def save_checkpoint(run_dir: str | Path, state: dict) -> Path:
    """Atomically replace ``<run_dir>/checkpoint/`` with ``state``; return the checkpoint folder."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final, partial, previous = run_dir / CHECKPOINT_DIR, run_dir / _PARTIAL, run_dir / _PREVIOUS
    shutil.rmtree(partial, ignore_errors=True)  # left by a job killed mid-write
    try:
        partial.mkdir()
        _write_state({"format_version": FORMAT_VERSION, **state}, partial / STATE_FILE)
        meta = {"step": state.get("step"), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "sha256": {STATE_FILE: sha256_file(partial / STATE_FILE)}}
        (partial / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(previous, ignore_errors=True)
            final.rename(previous)
        partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        if previous.exists() and not final.exists():
            previous.rename(final)
        raise
    shutil.rmtree(previous, ignore_errors=True)
    return final


def load_checkpoint(run_dir: str | Path, map_location: str | torch.device = "cpu") -> dict | None:
    """The saved state, or ``None`` when ``run_dir`` has no checkpoint.

    A checkpoint that cannot be read raises ``TrainingError`` naming the file and what to do.
    """
    run_dir = Path(run_dir)
    final, previous = run_dir / CHECKPOINT_DIR, run_dir / _PREVIOUS
    if not final.exists() and previous.is_dir():
        previous.rename(final)  # a kill landed between the two renames of save_checkpoint
    if not final.exists():
        return None
    path = final / STATE_FILE
    if not path.is_file():
        raise corrupt(path, "the file is missing")
    _verify_checksum(final)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # any unpickling/zip error means the bytes are not a checkpoint
        raise corrupt(path, f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        version = state.get("format_version") if isinstance(state, dict) else type(state).__name__
        raise corrupt(path, f"format version {version!r}, expected {FORMAT_VERSION}")
    return state


def _verify_checksum(folder: Path) -> None:
    """Refuse a ``state.pt`` whose bytes differ from those written (checksum in ``meta.json``)."""
    meta_path, path = folder / META_FILE, folder / STATE_FILE
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        recorded = meta.get("sha256", {}).get(STATE_FILE) if isinstance(meta, dict) else None
    except FileNotFoundError:
        raise corrupt(path, f"{meta_path}, which holds its checksum, is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise corrupt(path, f"{meta_path}, which holds its checksum, is unreadable ({exc})") from None
    if recorded is None:  # written before checksums were recorded
        log.warning("checkpoint %s has no recorded checksum; resuming without verifying its bytes", path)
        return
    actual = sha256_file(path)
    if actual != recorded:
        raise corrupt(path, f"the file is damaged: its SHA-256 is {actual}, but {recorded} was recorded in "
                            f"{meta_path} when it was written")


def remove_checkpoint(run_dir: str | Path) -> None:
    """Delete the checkpoint folder and any leftovers of an interrupted save."""
    run_dir = Path(run_dir)
    for name in (CHECKPOINT_DIR, _PARTIAL, _PREVIOUS):
        shutil.rmtree(run_dir / name, ignore_errors=True)


def corrupt(path: Path, why: str) -> TrainingError:
    """The error for a checkpoint that cannot be used: names the file and says to delete it."""
    return TrainingError(
        f"cannot resume from checkpoint {path}: {why}. Delete the folder {path.parent} to start "
        "this run from scratch"
    )


@contextlib.contextmanager
def run_lock(run_dir: str | Path, run: str, doing: str = "trained", name: str = ".lock") -> Iterator[None]:
    """Hold ``<run_dir>/<name>`` exclusively while run ``run`` is being ``doing``; a second process
    fails at once with a TrainingError naming the holder. The kernel drops the lock when its holder dies,
    so a killed job never leaves a stale lock. On file systems without flock (some network mounts) the
    run goes on unlocked, with a warning."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / name
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "(unknown: it has only just started)"
            raise TrainingError(
                f"run {run} is already being {doing} by process {holder} (it holds the lock {path}); "
                "wait for that job to finish or stop it, then re-run"
            ) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS):
                raise
            log.warning("%s: the file system does not support flock (%s); not guarding run %s against a "
                        "second job", path, exc.strerror, run)
            yield
            return
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()} on host {socket.gethostname()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ------------------------------------------------------------------ what the engine saves and checks
def run_defining(config: dict) -> dict:
    """The settings of ``TrainConfig`` (as a dict) that define a run: a checkpoint resumes only under the same."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items() if k in _RUN_DEFINING}


def changed_settings(state: dict, config: dict, world_size: int) -> dict:
    """``{setting: (saved, now)}`` for each run-defining setting (and the world size) that differs between
    the checkpoint ``state`` and the run's ``config`` (a ``TrainConfig`` as a dict)."""
    saved, now = state["config"], run_defining(config)
    changed = {k: (saved.get(k), v) for k, v in now.items() if saved.get(k) != v}
    if state["world_size"] != world_size:
        changed["world_size"] = (state["world_size"], world_size)
    return changed


def why_unwritten(run_dir: Path, state: dict) -> str:
    """Why a checkpoint write without an errno (torch.save's RuntimeError) failed, as far as can be told:
    too little free space for the state's tensors, or no write permission."""
    need = tensor_bytes(state)
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        free = None
    if free is not None and free < need:
        return (f"the disk is full ({free:,} bytes free, the checkpoint needs about {need:,}); free space "
                f"there or point the run elsewhere, then re-run")
    if not os.access(run_dir, os.W_OK):
        return f"no permission to write into {run_dir}; fix its permissions, then re-run"
    return "check free disk space and permissions there"


def tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def save_or_explain(run_dir: str | Path, state: dict, step: int) -> None:
    """:func:`save_checkpoint`, a failure raised as a TrainingError that says which step, where and why."""
    from leanlm.io import write_error

    where = checkpoint_dir(run_dir)
    try:
        save_checkpoint(run_dir, state)
    except OSError as exc:  # full or read-only disk, permissions: say which and where
        raise TrainingError(f"could not write the checkpoint of step {step}: {write_error(where, exc)}") from exc
    except Exception as exc:  # torch.save reports a failed write as RuntimeError, without errno
        raise TrainingError(f"could not write the checkpoint of step {step} into {where}: "
                            f"{why_unwritten(Path(run_dir), state)} ({type(exc).__name__}: {exc})") from exc


def restore(state: dict, run_dir: str | Path, config: dict, world_size: int, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer) -> tuple[TrainingState, list]:
    """Load a checkpoint's ``state`` into ``model`` and ``optimizer``; its :class:`TrainingState` and every
    rank's RNG streams. A checkpoint of other run-defining settings, or one that does not fit or lacks an
    entry, is refused by name."""
    path = checkpoint_dir(run_dir) / STATE_FILE
    try:
        changed = changed_settings(state, config, world_size)
        if changed:
            diff = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
            raise TrainingError(
                f"checkpoint {path} belongs to a run with other settings ({diff}); delete "
                f"{path.parent} to start over with the new settings, or restore the old ones"
            )
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError) as exc:
            raise corrupt(path, f"it does not fit this model/optimizer ({exc})") from exc
        return TrainingState.from_dict(state), state["rng"]
    except KeyError as exc:
        raise corrupt(path, f"the entry {exc} is missing") from None
