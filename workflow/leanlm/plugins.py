"""The plug-in registries of the pipeline, and the code each rule's job runs.

Plug-ins are found by dotted path, never imported for their side effects (a missing one fails loudly):

- pretraining objectives: the folder :mod:`leanlm.objectives` (``<name>.py`` holds ``Objective``);
- fine-tuning runners: the folder :mod:`leanlm.runners` (``<name>.py`` holds ``Runner``), chosen by the
  family when it owns one (ch. 4's ``lm_eval``, ``analysis``), else by the task's input shape;
- tables and figures: params/tables.yaml's ``renderer: "package.module:function"``
  (:data:`leanlm.reporting.render.TABLES`, ``PARAMS_TABLES``, :data:`leanlm.reporting.analytic.ANALYTIC`);
- input routes: the folder :mod:`leanlm.routes` (``<name>.py`` holds ``Route``), how a run's text becomes its
  model's inputs, chosen by the run's settings (:func:`route_name`);
- model variants (ch. 3 attention, ch. 4 token mixers, word embeddings) are the model library's own folders,
  read the same lazy way: :mod:`leanlm.modeling.variants`.

:mod:`leanlm.job_code` fingerprints each job's code from these dotted paths. This module imports no plug-in.
"""

from __future__ import annotations

from leanlm.registry import FolderRegistry
from leanlm.runs import uses_codebook

OBJECTIVES = FolderRegistry("pretraining objective", "leanlm.objectives", "Objective")
TASK_RUNNERS = FolderRegistry("task runner (input shape)", "leanlm.runners", "Runner")
INPUT_ROUTES = FolderRegistry("input route", "leanlm.routes", "Route")


def runner_name(family: str, task: str) -> str:
    """The runner of ``task`` in ``family``: the family's own where it has one, else the task's input shape."""
    if family in TASK_RUNNERS:
        return family
    from leanlm.data.tasks import get_task

    return get_task(task).input_shape


def route_name(run) -> str:
    """The input route of run ``run``, from its settings alone (no model library is imported): ch. 2's
    ``hashing`` for a hash tokenizer, ch. 4's ``fixed_text`` for a Qwen decoder (which attaches its fixed
    text only where the built model reads one), else ``subword``."""
    if uses_codebook(run):
        return "hashing"
    return "fixed_text" if run.backbone == "qwen" else "subword"


def input_route(run):
    """The input route run ``run`` takes (an instance of its ``Route``), imported now."""
    return INPUT_ROUTES.get(route_name(run))()
