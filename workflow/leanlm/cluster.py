"""What each Snakemake job asks a cluster for: GPUs, threads, memory, time limit, partition and account.

The profile's ``resources`` block (params/<profile>.yaml) sizes the two heavy kinds of job, pretraining and
fine-tuning; the rest (aggregation, rendering, the PDF, the data stages) are light and run on the machine
Snakemake runs on (the Snakefile's ``localrules``). The values reach SLURM through the rules' ``threads``
and ``resources`` (workflow/profiles/slurm), so the slurm profile itself needs no per-rule settings.

A pretraining job's time limit follows its step count: ``steps x step_seconds / 60 + setup_minutes``,
at most ``max_runtime``. A run longer than that goes on in the next job from its last checkpoint: on a
cluster the pretrain rule is resubmitted up to :func:`pretrain_retries` times (the Snakefile sets it at
the start of a cluster run; locally a failed job is not retried), enough for the longest run to finish
however slow its steps turn out, so a guess too small costs resubmissions, never the work done.

Where the jobs go is the cluster's business, not the profile's, and is set once in the environment of
the ``snakemake`` command (each variable alone; unset ones keep their default):

- ``LEANLM_SLURM_GPU_PARTITION``: partition of jobs with GPUs (default ``gpu``);
- ``LEANLM_SLURM_CPU_PARTITION``: partition of jobs without (default: the cluster's default partition);
- ``LEANLM_SLURM_ACCOUNT``: account charged (default: the executor plugin's guess, or none).
"""

from __future__ import annotations

import math
import os
import shlex
from typing import Iterable

from leanlm.errors import ConfigError

GPU_PARTITION_ENV = "LEANLM_SLURM_GPU_PARTITION"
CPU_PARTITION_ENV = "LEANLM_SLURM_CPU_PARTITION"
ACCOUNT_ENV = "LEANLM_SLURM_ACCOUNT"

# Used where a profile's resources block leaves a value out: a one-thread CPU job that fits a small node.
DEFAULTS = {
    "pretrain": {"gpus": 0, "threads": 1, "mem_mb": 4000, "step_seconds": 1.0, "setup_minutes": 10,
                 "max_runtime": 1440},
    "finetune": {"gpus": 0, "threads": 1, "mem_mb": 4000, "runtime": 120},
}


def job_settings(config: dict, kind: str) -> dict:
    """The profile's ``resources.<kind>`` laid over :data:`DEFAULTS`."""
    if kind not in DEFAULTS:
        raise ConfigError(f"no cluster resources for jobs of kind {kind!r}; known: {', '.join(DEFAULTS)}")
    return {**DEFAULTS[kind], **(config.get("resources") or {}).get(kind, {})}


def threads(config: dict, kind: str) -> int:
    return job_settings(config, kind)["threads"]


def gpus(config: dict, kind: str) -> int:
    return job_settings(config, kind)["gpus"]


def pretrain_runtime(config: dict, steps: int | None) -> int:
    """Minutes a pretraining job of ``steps`` optimizer steps asks for (see the module docstring)."""
    s = job_settings(config, "pretrain")
    wanted = s["setup_minutes"] + math.ceil((steps or 0) * s["step_seconds"] / 60)
    return max(1, min(s["max_runtime"], wanted))


def pretrain_retries(settings: Iterable[dict]) -> int:
    """How many times a cluster resubmits a failed pretraining job: enough for every run whose pretrain
    ``settings`` (one dict per run: ``steps``, ``checkpoint_every``) are given to finish by chaining jobs.

    A job that reaches its time limit has written at least one new checkpoint, unless its limit is
    shorter than ``checkpoint_every`` steps, in which case no number of jobs would finish the run. So a
    run needs at most ``ceil(steps / checkpoint_every)`` jobs whatever its speed (the profile's
    ``step_seconds`` is only a guess): the retries are that count for the longest chain (one job more
    than needed, a spare for a node failure). Runs without checkpoints cannot resume and add nothing; a
    profile without any gets 1 (one retry for a node failure).
    """
    chains = [math.ceil(s["steps"] / s["checkpoint_every"]) for s in settings
              if s.get("checkpoint_every") and s.get("steps")]
    return max(chains, default=1)


def placement(gpu_count: int, environ=os.environ) -> dict:
    """``slurm_partition``/``slurm_account`` resources from the environment (only those that are set)."""
    out = {}
    partition = (environ.get(GPU_PARTITION_ENV) or "gpu") if gpu_count else environ.get(CPU_PARTITION_ENV)
    if partition:
        out["slurm_partition"] = partition
    if environ.get(ACCOUNT_ENV):
        out["slurm_account"] = environ[ACCOUNT_ENV]
    return out


def job_resources(config: dict, kind: str, environ=os.environ) -> dict:
    """The ``resources`` of a rule of this kind: gpu, mem_mb, placement, and the fixed time limit (minutes)
    of kinds that have one (a pretraining job's follows its steps: :func:`pretrain_runtime`)."""
    s = job_settings(config, kind)
    fixed = {"runtime": s["runtime"]} if "runtime" in s else {}
    return {"gpu": s["gpus"], "mem_mb": s["mem_mb"], **fixed, **placement(s["gpus"], environ)}


def pretrain_launcher(config: dict, objective: str) -> str:
    """The command a pretraining job starts ``leanlm`` with: plain ``leanlm``, or, when the profile's
    ``resources.pretrain.gpus`` asks for more than one GPU and the run's ``objective`` can share its batch
    over processes, ``torchrun`` with one process per GPU on this node (``--standalone`` picks a free port,
    so two such jobs on one node do not collide). The global batch is the profile's either way."""
    count = gpus(config, "pretrain")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigError(f"{config.get('_params_file', 'the profile')}: resources.pretrain.gpus = {count!r} "
                          "must be a whole number >= 0")
    if count <= 1:
        return "leanlm"
    from leanlm.plugins import OBJECTIVES  # imports torch: only for profiles that ask for several GPUs

    if not OBJECTIVES.get(objective).data_parallel:  # e.g. translation, hub: one process, one GPU used
        return "leanlm"
    return f"torchrun --standalone --nproc-per-node {shlex.quote(str(count))} -m leanlm.cli --"
