"""The task registry: one :class:`TaskSpec` per downstream benchmark, read from params/tasks/*.yaml.

params/tasks/ is the one table (DESIGN.md §5), one file per task family (glue.yaml, superglue.yaml,
...), that lists each thesis benchmark with its hub source and schema mapping, its packaged
stand-in, input shape, label type and metrics; this module validates it and serves it by name.

Input shapes and the rows a task set holds for each (checked by leanlm.data.task_sets):

- ``single`` / ``pair``: ``{idx, text_a, text_b (None for single), label}`` (GLUE, most of SuperGLUE);
- ``multiple_choice``: ``{idx, text_a, text_b (question or None), choices: [str, ...], label}`` (COPA);
- ``span_qa``: ``{idx, context, question, answers: {text: [...], answer_start: [...]}}`` (SQuAD;
  empty lists = unanswerable, v2.0);
- ``seq2seq``: ``{idx, source, target}`` (WMT-14 en-de);
- ``lm``: ``{idx, text}`` (WikiText-103, Penn Treebank: evaluated by perplexity, not trained on).

Any row may also carry ``group`` (e.g. MultiRC's question id, for its per-question EM). Training and evaluation code asks ``get_task("cola")`` for the
head size (``num_labels``), the loss (``label_kind``) and the metrics to report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from leanlm import paths
from leanlm.io import read_yaml
from leanlm.errors import ConfigError
from leanlm.fixed_files import once
from leanlm.registry import Registry

INPUT_SHAPES = ("single", "pair", "multiple_choice", "span_qa", "seq2seq", "lm")
# classification/regression: text inputs; choice: index of the right choice; span: extractive QA;
# text: generated text (translation); none: nothing to predict (perplexity).
LABEL_KINDS = ("classification", "regression", "choice", "span", "text", "none")
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

    @property
    def is_text_classification(self) -> bool:
        """Single-text or text-pair classification/regression (GLUE-style heads)."""
        return self.input_shape in ("single", "pair")


def tasks_file() -> Path:
    """The directory of task family files (params/tasks/)."""
    return paths.params_dir() / "tasks"


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
    known_metrics = metric_names()
    if not isinstance(metrics, list) or not metrics or any(m not in known_metrics for m in metrics):
        raise _fail(path, f"{where}.metrics", f"{metrics!r}; each must be one of {', '.join(known_metrics)}")
    if entry["primary_metric"] != metrics[0]:
        raise _fail(path, f"{where}.primary_metric", f"{entry['primary_metric']!r} must be metrics[0] = {metrics[0]!r}")
    num_labels = entry["num_labels"]
    kind = entry["label_kind"]
    shape = entry["input_shape"]
    expected_kinds = {"multiple_choice": ("choice",), "span_qa": ("span",), "seq2seq": ("text",),
                      "lm": ("none",)}.get(shape, ("classification", "regression"))
    if kind not in expected_kinds:
        raise _fail(path, f"{where}.label_kind", f"{kind!r} does not fit input_shape {shape!r}; use {' or '.join(expected_kinds)}")
    if kind == "regression":
        ok, need = num_labels == 1, "1 for regression"
    elif kind in ("classification", "choice"):
        ok, need = isinstance(num_labels, int) and num_labels >= 2, f"at least 2 for {kind}"
    else:
        ok, need = num_labels == 0, f"0 for {kind}"
    if not isinstance(num_labels, int) or not ok:
        raise _fail(path, f"{where}.num_labels", f"{num_labels!r}; needs {need}")
    label_names = entry["label_names"] or []
    if len(label_names) != (num_labels if kind == "classification" else 0):
        raise _fail(path, f"{where}.label_names", f"{label_names!r}; needs one name per class ({num_labels}) for classification, none otherwise")
    hub = entry["hub"]
    if shape in ("single", "pair"):
        if not isinstance(hub, dict) or sorted(hub) != sorted(HUB_KEYS):
            raise _fail(path, f"{where}.hub", f"needs exactly the keys {', '.join(HUB_KEYS)}")
        if (hub["text_b"] is None) != (shape == "single"):
            raise _fail(path, f"{where}.hub.text_b", "must be null for single-text tasks and a column for pairs")
    elif not isinstance(hub, dict) or "dataset" not in hub:
        # Other shapes map columns in their family's hub loader; the dataset id is always needed.
        raise _fail(path, f"{where}.hub", "must be a mapping with at least the key dataset")
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


def metric_names() -> list[str]:
    """Metric names the evaluation registry knows (Appendix 3.8's metrics and more)."""
    from leanlm.evaluation.metrics import METRICS, import_metric_modules

    import_metric_modules()
    return METRICS.names()


@lru_cache(maxsize=4)
def _load(files: tuple[tuple[str, int], ...]) -> tuple[Registry, dict[str, list[str]]]:
    registry: Registry[TaskSpec] = Registry("task")
    families: dict[str, list[str]] = {}
    for path_str, _mtime in files:
        path = Path(path_str)
        doc = read_yaml(path)  # UTF-8, no repeated key: else a ConfigError naming file and line
        if not isinstance(doc, dict) or not doc:
            raise ConfigError(f"{path}: must map task families (e.g. glue) to their tasks")
        for family, tasks in doc.items():
            if not isinstance(tasks, dict) or not tasks:
                raise ConfigError(f"{path}: key {family}: must map task names to their specs")
            if family in families:
                raise ConfigError(f"{path}: task family {family!r} is defined in two files")
            families[family] = []
            for name, entry in tasks.items():
                if name in registry:
                    raise ConfigError(f"{path}: task {name!r} is defined twice (again in family {family!r})")
                registry.register(name)(_spec(path, family, name, entry))
                families[family].append(name)
    return registry, families


def _registry() -> tuple[Registry, dict[str, list[str]]]:
    return once(("tasks", str(tasks_file())), _read_registry)  # once per pass over unchanging files


def _read_registry() -> tuple[Registry, dict[str, list[str]]]:
    directory = tasks_file()
    files = sorted(directory.glob("*.yaml")) if directory.is_dir() else []
    if not files:
        raise ConfigError(f"{directory} has no task files; the task table lives in params/tasks/<family>.yaml "
                          f"of the project root")
    return _load(tuple((str(f), f.stat().st_mtime_ns) for f in files))


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``; ConfigError listing the known tasks when there is none."""
    try:
        return _registry()[0].get(name)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (tasks are defined in {tasks_file()})") from None


def task_names() -> list[str]:
    """Every task of params/tasks/*.yaml, in file order."""
    return [n for names in _registry()[1].values() for n in names]


def tasks_in_family(family: str) -> list[TaskSpec]:
    """The specs of one family (e.g. "glue"), in file order."""
    registry, families = _registry()
    if family not in families:
        raise ConfigError(f"unknown task family {family!r} in {tasks_file()}; known: {', '.join(families)}")
    return [registry.get(n) for n in families[family]]
