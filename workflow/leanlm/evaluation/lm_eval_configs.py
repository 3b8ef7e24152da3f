"""lm-evaluation-harness's own task configs, read offline, as the one source of ch. 4's metric lists.

lm-eval's tasks do not all report the same metrics (BoolQ, COPA and RTE report ``acc`` only; ARC,
PiQA, SciQ and HellaSwag ``acc`` and ``acc_norm``), and the runner fails when a declared metric is
missing from lm-eval's results. So nothing here is typed in: :func:`metric_list` reads a task's
``metric_list`` from the YAML that lm-eval itself loads (its offline :class:`lm_eval.tasks.TaskManager`
index over the task folders installed with it). The packaged stand-ins copy the list of the task they
stand in for (:mod:`leanlm.data.lm_eval_tasks`), and a test holds params/tasks/lm_eval.yaml to it.

The same configs say where each task's documents come from (:func:`task_dataset`: the hub dataset,
its config and the splits lm-eval reads), which is what ``leanlm mirror`` saves and what
:mod:`leanlm.data.lm_eval_mirror` points the task at when a hub mirror is set.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

from leanlm.errors import ConfigError


@functools.lru_cache(maxsize=1)
def _task_index() -> dict:
    # Building the index parses every YAML lm-eval ships (seconds), so it is built once per process.
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=True).task_index


# The split fields of an lm-eval task config, in the order lm-eval's ConfigurableTask reads them.
SPLIT_FIELDS = ("training_split", "validation_split", "test_split", "fewshot_split")


@dataclass(frozen=True)
class TaskDataset:
    """Where lm-eval reads a task's documents: ``datasets.load_dataset(path, name, **kwargs)``, and
    the splits its config names (training, validation, test, few-shot; each at most once)."""

    task: str
    path: str
    name: str | None
    splits: tuple[str, ...]
    kwargs: dict


def _entry(task: str):
    entry = _task_index().get(task)
    if entry is None or entry.cfg is None or "task" not in entry.cfg:
        import lm_eval

        raise ConfigError(f"lm-eval {lm_eval.__version__} has no task named {task!r} among its own task configs")
    return entry


def task_config(task: str) -> dict:
    """lm-eval's config of ``task`` with its includes merged and its ``!function`` tags unresolved."""
    return copy.deepcopy(_entry(task).cfg)


def task_yaml(task: str) -> Path:
    """The YAML file lm-eval defines ``task`` in (inside the installed ``lm_eval/tasks/``)."""
    entry = _entry(task)
    if entry.yaml_path is None:
        raise ConfigError(f"lm-eval task {task!r} is defined in Python, not by a YAML config")
    return Path(entry.yaml_path)


def task_dataset(task: str) -> TaskDataset:
    """The hub dataset, config and splits lm-eval's own config of ``task`` reads."""
    config = task_config(task)
    if not config.get("dataset_path") or config.get("custom_dataset"):
        raise ConfigError(f"lm-eval task {task!r} does not read a hub dataset (dataset_path "
                          f"{config.get('dataset_path')!r}); it cannot be mirrored")
    splits = tuple(dict.fromkeys(config[field] for field in SPLIT_FIELDS if config.get(field)))
    if not splits:
        raise ConfigError(f"lm-eval task {task!r} names no split ({', '.join(SPLIT_FIELDS)})")
    return TaskDataset(task=task, path=config["dataset_path"], name=config.get("dataset_name"), splits=splits,
                       kwargs=dict(config.get("dataset_kwargs") or {}))


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
