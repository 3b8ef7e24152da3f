"""lm-evaluation-harness's own task configs, read offline, as the one source of ch. 4's metric lists.

lm-eval's tasks do not all report the same metrics (BoolQ, COPA and RTE report ``acc`` only; ARC,
PiQA, SciQ and HellaSwag ``acc`` and ``acc_norm``), and the runner fails when a declared metric is
missing from lm-eval's results. So nothing here is typed in: :func:`metric_list` reads a task's
``metric_list`` from the YAML that lm-eval itself loads (its offline :class:`lm_eval.tasks.TaskManager`
index over the task folders installed with it). The packaged stand-ins copy the list of the task they
stand in for (:mod:`leanlm.data.lm_eval_tasks`), and a test holds params/tasks/lm_eval.yaml to it.
"""

from __future__ import annotations

import copy
import functools

from leanlm.errors import ConfigError


@functools.lru_cache(maxsize=1)
def _task_index() -> dict:
    # Building the index parses every YAML lm-eval ships (seconds), so it is built once per process.
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=True).task_index


def task_config(task: str) -> dict:
    """lm-eval's config of ``task`` with its includes merged and its ``!function`` tags unresolved."""
    entry = _task_index().get(task)
    if entry is None or entry.cfg is None or "task" not in entry.cfg:
        import lm_eval

        raise ConfigError(f"lm-eval {lm_eval.__version__} has no task named {task!r} among its own task configs")
    return copy.deepcopy(entry.cfg)


def metric_list(task: str) -> list[dict]:
    """``task``'s ``metric_list`` as lm-eval's YAML gives it (each ``{"metric": name, ...}``)."""
    config = task_config(task)
    metrics = config.get("metric_list")
    if not metrics:
        raise ConfigError(f"lm-eval task {task!r} ({config.get('task')}) declares no metric_list")
    return metrics


def metric_names(task: str) -> list[str]:
    """The names of the metrics lm-eval reports for ``task``, in its config's order."""
    return [m["metric"] for m in metric_list(task)]
