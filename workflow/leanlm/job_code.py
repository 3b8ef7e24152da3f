"""The ``code`` param of each Snakemake rule: a content hash of the code its job runs, no more.

That is the stage's core module and the job's own plug-ins, found by dotted path (its run's objective, its
tasks' runners, its run's input route, its table's renderer: :mod:`leanlm.plugins`; the attention, token
mixer and word embedding modules its run's model builds: :func:`leanlm.modeling.variants.variant_modules`),
with every leanlm module they import (:func:`leanlm.provenance.code_of`). So editing a fine-tuning runner
reruns the fine-tuning jobs that use it and no pretraining; editing one attention variant reruns the runs that
build it (pretraining and the fine-tuning of their models), and one input route (with ch. 2's hashing wing
behind it) the runs taking it; editing a chapter-2 renderer reruns chapter 2's tables only. Imported by
the Snakefile alone (the stage names below are strings, so no job's fingerprint includes this module).
"""

from __future__ import annotations

from leanlm.plugins import INPUT_ROUTES, OBJECTIVES, TASK_RUNNERS, route_name, runner_name
from leanlm.provenance import code_of


def model_code(run) -> list[str]:
    """The variant modules run ``run``'s model builds (none for a hub checkpoint's run, whose model the
    objective loads whole): its attention or token mixers and its word embedding."""
    from leanlm.modeling.variants import variant_modules

    return variant_modules(run.model)


def pretrain_code(run) -> str:
    """What run ``run``'s pretrain job runs: the pretraining stage, its objective, its input route and its
    model's variants."""
    return code_of("leanlm.stages.pretrain", OBJECTIVES.target(run.objective), INPUT_ROUTES.target(route_name(run)),
                   *model_code(run))


def finetune_code(family: str, tasks, run=None) -> str:
    """What a fine-tune job of ``family`` over ``tasks`` runs: the fine-tuning stage, the tasks' runners and,
    given ``run``, its input route and the variants of its model (the job builds it to load the pretrained
    weights)."""
    runners = sorted({TASK_RUNNERS.target(runner_name(family, task)) for task in tasks})
    own = (INPUT_ROUTES.target(route_name(run)), *model_code(run)) if run is not None else ()
    return code_of("leanlm.stages.finetune", *runners, *own)


def render_code(spec: dict) -> str:
    """What rendering a params/tables.yaml item runs: the rendering machinery of its kind and its renderer."""
    stage = "leanlm.reporting.analytic" if spec["kind"] == "analytic" else "leanlm.reporting.render"
    return code_of(stage, spec["renderer"])
