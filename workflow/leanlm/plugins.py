"""The plug-in registries of the pipeline, and the code each rule's job runs.

Plug-ins are found by dotted path, never imported for their side effects (a missing one fails loudly):

- pretraining objectives: the folder :mod:`leanlm.objectives` (``<name>.py`` holds ``Objective``);
- fine-tuning runners: the folder :mod:`leanlm.runners` (``<name>.py`` holds ``Runner``), chosen by the
  family when it owns one (ch. 4's ``lm_eval``, ``analysis``), else by the task's input shape;
- tables and figures: params/tables.yaml's ``renderer: "package.module:function"``
  (:data:`leanlm.reporting.render.TABLES`, ``PARAMS_TABLES``, :data:`leanlm.reporting.analytic.ANALYTIC`);
- model variants (ch. 3 attention, ch. 4 token mixers, word embeddings) are the model library's own folders,
  read the same lazy way: :mod:`leanlm.modeling.variants`.

:mod:`leanlm.job_code` fingerprints each job's code from these dotted paths. This module imports no plug-in.
"""

from __future__ import annotations

from leanlm.registry import FolderRegistry

OBJECTIVES = FolderRegistry("pretraining objective", "leanlm.objectives", "Objective")
TASK_RUNNERS = FolderRegistry("task runner (input shape)", "leanlm.runners", "Runner")


def runner_name(family: str, task: str) -> str:
    """The runner of ``task`` in ``family``: the family's own where it has one, else the task's input shape."""
    if family in TASK_RUNNERS:
        return family
    from leanlm.data.tasks import get_task

    return get_task(task).input_shape
