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
States are loaded with ``weights_only=True``: a checkpoint is data, never code.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from leanlm.errors import TrainingError

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
        meta = {"step": state.get("step"), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
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
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # any unpickling/zip error means the bytes are not a checkpoint
        raise corrupt(path, f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        version = state.get("format_version") if isinstance(state, dict) else type(state).__name__
        raise corrupt(path, f"format version {version!r}, expected {FORMAT_VERSION}")
    return state


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
