"""The ``code`` param of each Snakemake rule: a content hash of the code its job runs, no more.

That is the stage's core module and the job's own plug-in, found by dotted path (its run's objective, its
tasks' runners, its table's renderer: :mod:`leanlm.plugins`), with every leanlm module they import
(:func:`leanlm.provenance.code_of`). So editing a fine-tuning runner reruns the fine-tuning jobs that use
it and no pretraining; editing a chapter-2 renderer reruns chapter 2's tables only. Imported by the
Snakefile alone (the stage names below are strings, so no job's fingerprint includes this module).
"""

from __future__ import annotations

from leanlm.plugins import OBJECTIVES, TASK_RUNNERS, runner_name
from leanlm.provenance import code_of


def pretrain_code(run) -> str:
    """What run ``run``'s pretrain job runs: the pretraining stage and its objective."""
    return code_of("leanlm.stages.pretrain", OBJECTIVES.target(run.objective))


def finetune_code(family: str, tasks) -> str:
    """What a fine-tune job of ``family`` over ``tasks`` runs: the fine-tuning stage and the tasks' runners."""
    runners = sorted({TASK_RUNNERS.target(runner_name(family, task)) for task in tasks})
    return code_of("leanlm.stages.finetune", *runners)


def render_code(spec: dict) -> str:
    """What rendering a params/tables.yaml item runs: the rendering machinery of its kind and its renderer."""
    stage = "leanlm.reporting.analytic" if spec["kind"] == "analytic" else "leanlm.reporting.render"
    return code_of(stage, spec["renderer"])
