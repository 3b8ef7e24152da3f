"""lm-evaluation-harness's own task configs, read offline, as the one source of ch. 4's metric lists.

lm-eval's tasks do not all report the same metrics (BoolQ, COPA and RTE report ``acc`` only; ARC,
PiQA, SciQ and HellaSwag ``acc`` and ``acc_norm``), and the runner fails when a declared metric is
missing from lm-eval's results. So nothing here is typed in: :func:`metric_list` reads a task's
``metric_list`` from the YAML that lm-eval itself loads (its offline :class:`lm_eval.tasks.TaskManager`
index over the task folders installed with it). The packaged stand-ins copy the list of the task they
stand in for (:mod:`leanlm.lm_eval.standins`), and a test holds params/tasks/lm_eval.yaml to it.

The same configs say where each task's documents come from (:func:`task_dataset`: the hub dataset,
its config and the splits lm-eval reads), which is what ``leanlm mirror`` saves and what
:mod:`leanlm.lm_eval.mirror` points the task at when a hub mirror is set.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.io import json_text, write_bytes
from leanlm.scratch import build_once


@dataclass(frozen=True)
class IndexEntry:
    """What is kept of lm-eval's index entry of a task: its config (includes merged) and its YAML file."""

    cfg: dict
    yaml_path: str | None


INDEX_FORMAT = "v2"  # v2: a first line with the SHA-256 of the JSON body that follows it


def index_cache_file() -> Path:
    """Where the task index of the installed lm-eval is kept: one file per lm-eval version and install."""
    import lm_eval

    where = hashlib.sha1(str(Path(lm_eval.__file__).resolve().parent).encode()).hexdigest()[:10]
    # INDEX_FORMAT: bump it when what is stored changes, so that older files are not read as the new format.
    return paths.cache_dir() / "lm_eval" / f"task_index-{INDEX_FORMAT}-{lm_eval.__version__}-{where}.json"


def _build_index_file(target: Path) -> None:
    """Write lm-eval's index of its tasks (those with a config) to ``target``: a header line
    ``{"sha256": ..., "tasks": n}`` with the digest of the JSON body after it, so that an edited or emptied
    file is told from lm-eval's own index when it is read."""
    from lm_eval.tasks import TaskManager

    index = TaskManager(include_defaults=True).task_index
    tasks = {name: {"cfg": entry.cfg, "yaml_path": str(entry.yaml_path) if entry.yaml_path else None}
             for name, entry in index.items() if entry.cfg is not None and "task" in entry.cfg}
    body = json_text(tasks).encode("utf-8")
    header = json.dumps({"sha256": hashlib.sha256(body).hexdigest(), "tasks": len(tasks)})
    write_bytes(target, header.encode("utf-8") + b"\n" + body)


def _read_index_file(target: Path) -> dict[str, IndexEntry]:
    """The index :func:`_build_index_file` wrote, checked against its header's SHA-256; ConfigError naming
    the file, and saying to delete it (the next job writes it anew), when it is unreadable or was changed."""
    redo = f"delete {target} and rerun: it is made again from lm-eval's own task configs"
    try:
        head, _, body = target.read_bytes().partition(b"\n")
        recorded = json.loads(head).get("sha256")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise ConfigError(f"{target}: not a readable lm-eval task index cache ({exc!r}); {redo}") from None
    if recorded != (actual := hashlib.sha256(body).hexdigest()):
        raise ConfigError(f"{target}: lm-eval's task index cache was changed after it was written (SHA-256 of its "
                          f"tasks {actual}, recorded {recorded}); {redo}")
    try:
        return {name: IndexEntry(cfg=entry["cfg"], yaml_path=entry["yaml_path"])
                for name, entry in json.loads(body).items()}
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{target}: not a readable lm-eval task index cache ({exc!r}); {redo}") from None


@functools.lru_cache(maxsize=1)
def _task_index() -> dict[str, IndexEntry]:
    # lm-eval builds its index by parsing every YAML it ships: about 10 s of CPU, which every ch. 4
    # evaluation job paid (most of the rehearsal's CPU time). The tasks (those with a config) of that
    # index are written once per machine to the cache (index_cache_file, keyed by lm-eval's version and
    # install folder; build_once across processes) and read from there: about 0.6 s.
    target = index_cache_file()
    build_once(target, lambda: _build_index_file(target), "lm-eval's task index")
    return _read_index_file(target)


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
    if entry is None:
        import lm_eval

        raise ConfigError(f"lm-eval {lm_eval.__version__} has no task named {task!r} among its own task configs")
    return entry


def task_config(task: str) -> dict:
    """lm-eval's config of ``task`` with its includes merged and its ``!function`` tags unresolved."""
    return copy.deepcopy(_entry(task).cfg)


def installed_tasks_dir() -> Path:
    """The ``tasks/`` folder of the installed lm-eval: the only place a task YAML may import code from."""
    import lm_eval

    return (Path(lm_eval.__file__).resolve().parent / "tasks").resolve()


def task_yaml(task: str) -> Path:
    """The YAML file lm-eval defines ``task`` in, inside the installed ``lm_eval/tasks/``. The path comes from
    the cached index (a file in the cache folder, which anyone with write access there could edit), and
    lm-eval imports the Python its ``!function`` tags name beside it; so a path elsewhere is refused."""
    entry = _entry(task)
    if entry.yaml_path is None:
        raise ConfigError(f"lm-eval task {task!r} is defined in Python, not by a YAML config")
    path, tasks_dir = Path(entry.yaml_path).resolve(), installed_tasks_dir()
    if not path.is_relative_to(tasks_dir):
        raise DataError(f"{index_cache_file()}: the task index names {path} for lm-eval task {task!r}, outside "
                        f"lm-eval's installed tasks ({tasks_dir}); delete that file (it is rebuilt) and rerun")
    return path


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
