"""The task registry: one :class:`TaskSpec` per downstream benchmark, read from params/tasks.yaml.

params/tasks.yaml is the one table (DESIGN.md §5) that lists each thesis benchmark with its hub
source and schema mapping, its packaged stand-in, input shape, label type and metrics; this module
validates it and serves it by name. Training and evaluation code asks ``get_task("cola")`` for the
head size (``num_labels``), the loss (``label_kind``) and the metrics to report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from leanlm import paths
from leanlm.errors import ConfigError
from leanlm.registry import Registry

INPUT_SHAPES = ("single", "pair")
LABEL_KINDS = ("classification", "regression")
# Metric names shared with leanlm.evaluation (Appendix 3.8's metrics).
METRICS = ("accuracy", "f1", "matthews", "spearman", "pearson")
HUB_KEYS = ("dataset", "config", "text_a", "text_b", "label", "train", "validation")
SPEC_KEYS = ("thesis_name", "input_shape", "label_kind", "num_labels", "label_names", "metrics",
             "primary_metric", "hub", "packaged")


@dataclass(frozen=True)
class TaskSpec:
    """What a task is: its shape, labels and metrics, and where each source gets it from."""

    name: str                 # registry name, e.g. "sst2"
    family: str               # e.g. "glue" (the finetune.<family> block of a profile)
    thesis_name: str          # the thesis's column header, e.g. "SST"
    input_shape: str          # "single" | "pair"
    label_kind: str           # "classification" | "regression"
    num_labels: int           # 1 for regression
    metrics: list[str]        # primary first
    primary_metric: str
    hub: dict[str, Any]       # dataset, config, text_a, text_b, label, train, validation
    packaged: str             # description of the offline stand-in
    label_names: list[str] = field(default_factory=list)  # GLUE's names of label ids 0..n-1

    @property
    def is_pair(self) -> bool:
        return self.input_shape == "pair"

    @property
    def is_regression(self) -> bool:
        return self.label_kind == "regression"


def tasks_file() -> Path:
    return paths.params_dir() / "tasks.yaml"


def _fail(path: Path, where: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {where}: {message}")


def _spec(path: Path, family: str, name: str, entry: Any) -> TaskSpec:
    where = f"key {family}.{name}"
    if not isinstance(entry, dict):
        raise _fail(path, where, f"must be a mapping of {', '.join(SPEC_KEYS)}")
    missing = [k for k in SPEC_KEYS if k not in entry]
    extra = sorted(set(entry) - set(SPEC_KEYS))
    if missing or extra:
        raise _fail(path, where, f"missing keys {missing}, unknown keys {extra}; allowed: {', '.join(SPEC_KEYS)}")
    if entry["input_shape"] not in INPUT_SHAPES:
        raise _fail(path, f"{where}.input_shape", f"{entry['input_shape']!r}; allowed: {', '.join(INPUT_SHAPES)}")
    if entry["label_kind"] not in LABEL_KINDS:
        raise _fail(path, f"{where}.label_kind", f"{entry['label_kind']!r}; allowed: {', '.join(LABEL_KINDS)}")
    metrics = entry["metrics"]
    if not isinstance(metrics, list) or not metrics or any(m not in METRICS for m in metrics):
        raise _fail(path, f"{where}.metrics", f"{metrics!r}; each must be one of {', '.join(METRICS)}")
    if entry["primary_metric"] != metrics[0]:
        raise _fail(path, f"{where}.primary_metric", f"{entry['primary_metric']!r} must be metrics[0] = {metrics[0]!r}")
    num_labels = entry["num_labels"]
    regression = entry["label_kind"] == "regression"
    if not isinstance(num_labels, int) or (regression and num_labels != 1) or (not regression and num_labels < 2):
        raise _fail(path, f"{where}.num_labels", f"{num_labels!r}; regression needs 1, classification at least 2")
    label_names = entry["label_names"] or []
    if len(label_names) != (0 if regression else num_labels):
        raise _fail(path, f"{where}.label_names", f"{label_names!r}; needs one name per class ({num_labels}), none for regression")
    hub = entry["hub"]
    if not isinstance(hub, dict) or sorted(hub) != sorted(HUB_KEYS):
        raise _fail(path, f"{where}.hub", f"needs exactly the keys {', '.join(HUB_KEYS)}")
    if (hub["text_b"] is None) != (entry["input_shape"] == "single"):
        raise _fail(path, f"{where}.hub.text_b", "must be null for single-text tasks and a column for pairs")
    return TaskSpec(
        name=name,
        family=family,
        thesis_name=str(entry["thesis_name"]),
        input_shape=entry["input_shape"],
        label_kind=entry["label_kind"],
        num_labels=num_labels,
        metrics=list(metrics),
        primary_metric=entry["primary_metric"],
        hub=dict(hub),
        packaged=str(entry["packaged"]).strip(),
        label_names=list(label_names),
    )


@lru_cache(maxsize=4)
def _load(path_str: str, mtime_ns: int) -> tuple[Registry, dict[str, list[str]]]:
    path = Path(path_str)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"{path}: must map task families (e.g. glue) to their tasks")
    registry: Registry[TaskSpec] = Registry("task")
    families: dict[str, list[str]] = {}
    for family, tasks in doc.items():
        if not isinstance(tasks, dict) or not tasks:
            raise ConfigError(f"{path}: key {family}: must map task names to their specs")
        families[family] = []
        for name, entry in tasks.items():
            if name in registry:
                raise ConfigError(f"{path}: task {name!r} is defined twice (again in family {family!r})")
            registry.register(name)(_spec(path, family, name, entry))
            families[family].append(name)
    return registry, families


def _registry() -> tuple[Registry, dict[str, list[str]]]:
    path = tasks_file()
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; the task table lives in params/tasks.yaml of the project root")
    return _load(str(path), path.stat().st_mtime_ns)


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``; ConfigError listing the known tasks when there is none."""
    try:
        return _registry()[0].get(name)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (tasks are defined in {tasks_file()})") from None


def task_names() -> list[str]:
    """Every task of params/tasks.yaml, in file order."""
    return [n for names in _registry()[1].values() for n in names]


def tasks_in_family(family: str) -> list[TaskSpec]:
    """The specs of one family (e.g. "glue"), in file order."""
    registry, families = _registry()
    if family not in families:
        raise ConfigError(f"unknown task family {family!r} in {tasks_file()}; known: {', '.join(families)}")
    return [registry.get(n) for n in families[family]]
