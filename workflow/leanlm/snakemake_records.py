"""What Snakemake has recorded about an output, read from its file persistence (``.snakemake/``).

Snakemake marks each output of a job *incomplete* when the job starts (a file under
``.snakemake/incomplete/``) and, once the job has ended and its outputs are there, writes the output's
metadata record (``.snakemake/metadata/``: the job's params, code, inputs, finishing time) and removes the
mark. Both are named by the urlsafe base64 of the output's path relative to the working directory, split
into folders of at most NAME_MAX characters (every part but the last prefixed with ``@``): Snakemake's
``FilePersistence._record_path``, which ``tests/test_share.py`` holds this module to.

Used by ``leanlm share`` (it ships the records with the outputs), by ``leanlm finetune`` (which deletes
the training checkpoint of the pretraining it reads: :func:`remove_recorded_checkpoint`) and by the
Snakefile's hooks, which delete a finished run's training checkpoint only once Snakemake has recorded
the run's outputs (:func:`remove_finished_checkpoints`). It belongs to the workflow floor: no library
module (modeling, data, training, evaluation, the stages) imports it (tests/test_layering.py).
"""

from __future__ import annotations

import os
from base64 import urlsafe_b64decode, urlsafe_b64encode
from pathlib import Path

METADATA = Path(".snakemake") / "metadata"  # one JSON record per finished output
INCOMPLETE = Path(".snakemake") / "incomplete"  # one mark per output of a job started and not yet recorded


def record_path(folder: Path, key: str) -> Path:
    """Where Snakemake keeps the record (or mark) of output ``key`` in ``folder``."""
    max_len = os.pathconf(folder, "PC_NAME_MAX") if os.name == "posix" and folder.exists() else 255
    max_len = max_len or 255
    b64 = urlsafe_b64encode(key.encode()).decode()
    parts = [b64[i:i + max_len - 1] for i in range(0, len(b64), max_len - 1)]
    return folder.joinpath(*(["@" + p for p in parts[:-1]] + [parts[-1]]))


def decode(record: Path, folder: Path) -> str:
    """The output path a record file in ``folder`` belongs to (the inverse of :func:`record_path`)."""
    parts = record.relative_to(folder).parts
    return urlsafe_b64decode("".join(p.removeprefix("@") for p in parts)).decode()


def recorded_complete(root: Path, outputs: list[str]) -> bool:
    """Whether Snakemake has recorded every one of ``outputs`` (paths relative to ``root``) as finished:
    each exists, has a metadata record and no incomplete mark. A job killed, or a Snakemake stopped,
    between the job's end and the recording leaves the marks, and the job is rerun (``rerun-incomplete``)."""
    metadata, incomplete = root / METADATA, root / INCOMPLETE
    return bool(outputs) and all(
        (root / key).exists() and record_path(metadata, key).is_file()
        and not record_path(incomplete, key).exists()
        for key in outputs
    )


def remove_finished_checkpoints(root: Path, runs: dict[str, tuple[Path, list[str]]]) -> list[str]:
    """Delete the training checkpoint of every run whose outputs Snakemake has recorded as finished.

    ``runs`` maps a run id to its run folder (where ``checkpoint/`` lies) and its pretraining outputs.
    The pretraining job keeps its final checkpoint (``leanlm pretrain --keep-checkpoint``): were it deleted
    by the job, a job or Snakemake killed after it and before Snakemake recorded the outputs would leave
    them incomplete, and the rerun would train from step 0. Returns the runs whose checkpoint went.
    """
    with_state = {run: (folder, outputs) for run, (folder, outputs) in runs.items()
                  if any((root / folder / name).exists() for name in _checkpoint_names())}
    done = [run for run, (_, outputs) in with_state.items() if recorded_complete(root, outputs)]
    if done:
        from leanlm.training.checkpointing import remove_checkpoint  # imports torch: only when there is work

        for run in done:
            remove_checkpoint(root / with_state[run][0])
    return done


def remove_recorded_checkpoint(root: Path, profile: str, run_id: str) -> bool:
    """Delete run ``run_id``'s training checkpoint if Snakemake has recorded its pretraining outputs. A
    fine-tuning job calls it at its start: Snakemake starts one only after recording the pretraining it reads,
    so a finished run's state goes as soon as its first consumer starts, not at the end of the workflow
    (on a cluster, weeks of runs would otherwise keep every finished run's state). Returns whether it went."""
    from leanlm.paths import pretrain_outputs

    folder = f"models/{profile}/{run_id}"
    return bool(remove_finished_checkpoints(root, {run_id: (folder, pretrain_outputs(profile, run_id))}))


def _checkpoint_names() -> tuple[str, ...]:
    # leanlm.training.checkpointing's folder and the leftovers of an interrupted save; spelled here so that
    # looking costs no torch import (tests/test_faults_runtime.py checks they agree).
    return ("checkpoint", ".checkpoint.partial", ".checkpoint.previous")
