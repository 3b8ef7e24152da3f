"""Chapter 4's inputs to tables and figures: which run is which printed row, lm-eval scores in the
thesis's units, the Rnd. Guess / Majority rows, and the per-run analysis and loss records.

Every file format chapter 4 reporting reads is read here, so an upstream change is one edit:

``results/<profile>/experiments/<experiment>.csv`` (family ``lm_eval``)
    one row per (run, task, seed, metric) with lm-eval's metric names: ``acc`` / ``acc_stderr``
    (fractions) for the seven NLU tasks and LAMBADA, ``word_perplexity`` for WikiText,
    ``perplexity`` for LAMBADA. Tasks are named as params/tasks/lm_eval.yaml names them
    (``lm_eval_arc_easy``), as lm-eval does (``arc_easy``) or as the packaged stand-ins
    (``leanlm_definition``); :func:`canonical_task` maps all three to the thesis's.
``results/<profile>/baselines/<experiment>/lm_eval.json`` (written by aggregation: experiment_baselines)
    ``{"tasks": {task: {"random_guess": {metric: value} | null, "majority": {...} | null}}}``, as
    :func:`leanlm.lm_eval.baselines.random_guess_and_majority` returns per task. Without it the
    rows are computed from the profile's local task files (data/<profile>/tasks/lm_eval/).
``results/<profile>/runs/<run_id>/analysis.json`` (family ``analysis``, leanlm.runners.analysis)
    a results JSON whose entry ``results[0]`` holds ``context_length_perplexity``
    (``{"perplexity": {"128": ppl, ...}, ...}``; else its metrics ``perplexity_ctx<L>``) and
    ``attention`` (:func:`leanlm.evaluation.attention_analysis.attention_profile`):
    ``indicators.layers[i] = {"layer": 1-based, "kind", "mean": {ENTROPY, ..., SINK} | None}`` and
    ``logits = {"edges", "magnitude", "layers": [{"layer", "counts", "min", "max", "abs_max", ...}]}``.
``results/<profile>/runs/<run_id>/pretrain.json``
    ``"history"``: ``[{"step", "loss", "lr"}, ...]`` (entries without ``loss`` are evaluations).
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.evaluation.indicators import INDICATORS
from leanlm.runs import Run, runs

log = logging.getLogger(__name__)

# The thesis's lm-eval tasks (§4.4.1) in Table 4.1's column order, and their printed headers.
NLU_TASKS = ["arc_easy", "boolq", "copa", "piqa", "sciq", "rte", "hellaswag"]
LM_TASKS = ["wikitext", "lambada_openai"]
TASK_HEADERS = {"arc_easy": "ARC-E", "boolq": "BoolQ", "copa": "COPA", "piqa": "PiQA", "sciq": "SciQ",
                "rte": "RTE", "hellaswag": "HellaSwag", "wikitext": "Wiki", "lambada_openai": "LAMBADA"}
# Columns of params/reported/table_4_{1,2,3}.csv; reproduced frames use the same names.
SCORE_COLUMNS = ([c for t in NLU_TASKS for c in (t, f"{t}_std")] + ["avg_acc", "wikitext_ppl", "lambada_openai_ppl",
                 "lambada_openai_acc", "lambada_openai_acc_std"])
# Printed task names (params/tasks/*.yaml thesis_name), squashed to letters and digits.
_PRINTED = {"arce": "arc_easy", "arceasy": "arc_easy", "boolq": "boolq", "copa": "copa", "piqa": "piqa",
            "sciq": "sciq", "rte": "rte", "hellaswag": "hellaswag", "wiki": "wikitext", "wikitext": "wikitext",
            "lambada": "lambada_openai", "lambadaopenai": "lambada_openai"}

CONFIG_ORDER = ["standard", "uniform", "hybrid", "skip"]
LAYOUT_ALIASES = {"hybrid": "even", "50%": "even", "pct25": "25%"}


# ----------------------------------------------------------------------------- runs -> printed rows
def canonical_layout(layout: str | None) -> str:
    """A layout name as layouts.py spells it ('pct25' -> '25%', 'hybrid' -> 'even')."""
    layout = layout or "uniform"
    return LAYOUT_ALIASES.get(layout, layout)


def configuration(run: Run) -> str:
    """standard | uniform | hybrid | skip, or the Table 4.11 layout of a non-default hybrid."""
    if run.skip_simple_layers:
        return "skip"
    if run.attention == "standard":
        return "standard"
    layout = canonical_layout(run.model.get("layout"))
    return {"uniform": "uniform", "even": "hybrid"}.get(layout, layout)


def variant_label(name: str) -> str:
    """The printed name of a mixer ('non_approximate' -> 'Non-apx.')."""
    from leanlm.modeling.mixers import MIXERS

    return MIXERS.get(name).label if name in MIXERS else name


@dataclass(frozen=True)
class Ch4Row:
    run: Run
    config: str
    variant: str
    label: str

    @property
    def run_id(self) -> str:
        return self.run.run_id


def row_label(config: str, variant: str, heads: dict[str, str]) -> str:
    """'Standard', or the section head and the variant as the thesis prints them ('UNIFORM MLP')."""
    if config == "standard":
        return "Standard"
    return f"{heads.get(config, config)} {variant_label(variant)}"


def _order(row: Ch4Row) -> tuple:
    from leanlm.modeling.mixers import CH4_VARIANTS

    config = CONFIG_ORDER.index(row.config) if row.config in CONFIG_ORDER else len(CONFIG_ORDER)
    variant = CH4_VARIANTS.index(row.variant) if row.variant in CH4_VARIANTS else len(CH4_VARIANTS)
    return (config, variant, row.run_id)


def experiment_rows(config: dict, experiments: Sequence[str], table: str, heads: dict[str, str],
                    optional: Sequence[str] = ()) -> list[Ch4Row]:
    """The runs of ``experiments`` (all required) and ``optional`` ones, as printed rows in thesis order."""
    matrix = config.get("_matrix", {})
    for experiment in experiments:
        if experiment not in matrix:
            raise LeanLMError(
                f"{table} needs experiment {experiment!r}, which profile {config['profile']!r} does not run; "
                f"add it to key experiments of {config.get('_params_file', 'the profile')}")
    wanted = list(experiments) + [e for e in optional if e in matrix]
    rows = [Ch4Row(r, configuration(r), r.attention, row_label(configuration(r), r.attention, heads))
            for r in runs(config) if r.experiment in wanted]
    return sorted(rows, key=_order)


# ----------------------------------------------------------------------------- lm-eval scores
def canonical_task(name: str) -> str | None:
    """The thesis task a profile's lm-eval task stands for (``leanlm_definition`` -> ``arc_easy``), or None."""
    if name in NLU_TASKS or name in LM_TASKS:
        return name
    if name.removeprefix("lm_eval_") in NLU_TASKS + LM_TASKS:  # params/tasks/lm_eval.yaml's names
        return name.removeprefix("lm_eval_")
    from leanlm.lm_eval.standins import THESIS_TASKS

    if name in THESIS_TASKS:
        return THESIS_TASKS[name]
    try:
        from leanlm.data.tasks import get_task

        printed = get_task(name).thesis_name
    except Exception:  # noqa: BLE001 - not in params/tasks: no thesis counterpart
        return None
    return _PRINTED.get(re.sub(r"[^a-z0-9]", "", str(printed).lower()))


def profile_tasks(config: dict) -> dict[str, str]:
    """Thesis task -> the profile's lm-eval task name, for the profile's tasks with a counterpart."""
    tasks = config.get("finetune", {}).get("lm_eval", {}).get("tasks", [])
    out: dict[str, str] = {}
    for task in tasks:
        thesis = canonical_task(task)
        if thesis is not None and thesis not in out:
            out[thesis] = task
    return out


def _metric(values: dict[str, float], thesis_task: str) -> dict[str, float]:
    """One task's lm-eval metrics as Table 4.1's columns (accuracies in %)."""
    pct = lambda key: 100.0 * values[key] if key in values else math.nan  # noqa: E731
    if thesis_task == "wikitext":
        return {"wikitext_ppl": values.get("word_perplexity", values.get("perplexity", math.nan))}
    if thesis_task == "lambada_openai":
        return {"lambada_openai_ppl": values.get("perplexity", math.nan), "lambada_openai_acc": pct("acc"),
                "lambada_openai_acc_std": pct("acc_stderr")}
    return {thesis_task: pct("acc"), f"{thesis_task}_std": pct("acc_stderr")}


def with_average(record: dict[str, float]) -> dict[str, float]:
    accs = [record[t] for t in NLU_TASKS if not _missing(record.get(t))]
    return {**record, "avg_acc": sum(accs) / len(accs) if accs else math.nan}


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def lm_eval_scores(tidy: pd.DataFrame, profile: str, config: dict, rows: Sequence[Ch4Row], table: str
                   ) -> pd.DataFrame:
    """Per row (indexed by run_id): Table 4.1's columns from the run's lm-eval results (mean over seeds).

    Columns of tasks the profile does not evaluate are NaN; a task it evaluates but a run lacks is an
    error naming the run's results file.
    """
    tasks = profile_tasks(config)
    if not tasks:
        raise LeanLMError(f"{table}: profile {profile!r} has no lm-eval task with a thesis counterpart under "
                          f"finetune.lm_eval.tasks ({config.get('_params_file', 'the profile')})")
    lm = tidy[tidy["family"] == "lm_eval"]
    records = {}
    for row in rows:
        source = paths.results_dir(profile) / "runs" / row.run_id / "lm_eval.json"
        mine = lm[lm["run_id"] == row.run_id]
        if mine.empty:
            raise LeanLMError(
                f"{table} needs run {row.run_id} on lm_eval, but its experiment's aggregated results "
                f"(results/{profile}/experiments/) have none: {source} is missing. Run `leanlm finetune --run {row.run_id} --family lm_eval`, "
                "then `leanlm aggregate`")
        record: dict[str, float] = {c: math.nan for c in SCORE_COLUMNS}
        for thesis, task in tasks.items():
            values = mine[mine["task"] == task].groupby("metric")["value"].mean().to_dict()
            if not values:
                raise LeanLMError(f"{table}: {source} has no result for task {task!r} ({thesis}); rerun "
                                  f"`leanlm finetune --run {row.run_id} --family lm_eval`, then `leanlm aggregate`")
            record.update(_metric(values, thesis))
        records[row.run_id] = with_average(record)
    return pd.DataFrame.from_dict(records, orient="index")[SCORE_COLUMNS]


# ----------------------------------------------------------------------------- Rnd. Guess / Majority
BASELINE_ROWS = {"random_guess": "Rnd. Guess", "majority": "Majority"}


def _names(task: str) -> list[str]:
    """A profile task's names: its own, its thesis task's and that task's packaged stand-in's."""
    from leanlm.lm_eval.standins import THESIS_TASKS

    thesis = canonical_task(task)
    standin = {v: k for k, v in THESIS_TASKS.items()}.get(thesis)
    return list(dict.fromkeys(n for n in (task, standin, thesis) if n))


def _local_task_file(profile: str, task: str) -> Path | None:
    """The local lm-eval task YAML (data/<profile>/tasks/lm_eval/<stand-in>.yaml) of a profile task."""
    root = paths.data_dir(profile)
    for name in _names(task):
        for candidate in [root / "tasks" / "lm_eval" / f"{name}.yaml",
                          *(sorted(root.rglob(f"{name}.yaml")) if root.is_dir() else [])]:
            if candidate.is_file():
                return candidate
    return None


def baseline_records(profile: str, config: dict, experiments: Sequence[str] | None = None) -> dict[str, dict]:
    """Per profile task: ``{"random_guess": {metric: value} | None, "majority": ...}``.

    From what aggregation wrote: results/<profile>/baselines/<experiment>/lm_eval.json of ``experiments``
    (a table's own runs; the rows depend only on the tasks, the limit and the tokenizer, so the runs agree:
    the first experiment's row of a task is kept), or without ``experiments`` results/<profile>/baselines/
    lm_eval.json; else computed from the profile's local lm-eval task files (packaged stand-ins); a task
    with neither has no entry.
    """
    from leanlm.lm_eval.baselines import baselines_path

    written = [baselines_path(profile, e) for e in experiments] if experiments is not None else [baselines_path(profile)]
    found: dict[str, dict] = {}
    for path in (p for p in written if p.is_file()):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise LeanLMError(f"{path}: not readable JSON ({exc}); delete it and rerun the job that wrote it") from None
        for task, row in doc.get("tasks", doc).items():
            found.setdefault(task, row)
    if found:
        return found
    from leanlm.lm_eval.baselines import random_guess_and_majority

    tokenizer = None
    out = {}
    for task in profile_tasks(config).values():
        source = _local_task_file(profile, task)
        if source is None:
            continue
        if tokenizer is None:
            try:
                from leanlm.data.tokenizer import load_tokenizer

                tokenizer = load_tokenizer(profile)
            except Exception as exc:  # noqa: BLE001 - perplexity baselines need it; accuracies do not
                log.warning("no tokenizer for profile %s (%s): random-guess perplexities left out", profile, exc)
                tokenizer = False
        out[task] = random_guess_and_majority(source, tokenizer or None)
    return out


def baseline_scores(profile: str, config: dict, experiments: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """``{"Rnd. Guess": {column: value}, "Majority": {...}}`` in Table 4.1's columns (NaN: not computed);
    ``experiments``: see :func:`baseline_records`."""
    records = baseline_records(profile, config, experiments)
    out = {}
    for key, label in BASELINE_ROWS.items():
        record: dict[str, float] = {c: math.nan for c in SCORE_COLUMNS}
        for thesis, task in profile_tasks(config).items():
            entry = next((records[n] for n in _names(task) if records.get(n)), {})
            values = entry.get(key)
            if values:  # exact rates: no standard error (the thesis prints 0.0)
                record.update({k: 0.0 if k.endswith("_std") else v for k, v in _metric(values, thesis).items()})
        out[label] = with_average(record)
    return out


# ----------------------------------------------------------------------------- analysis.json
@dataclass
class Analysis:
    """One run's analysis record, layers numbered from 1 as in the thesis."""

    run_id: str
    indicators: pd.DataFrame                       # index: layer (layers with a map); columns: INDICATORS
    kinds: dict[int, str] = field(default_factory=dict)        # layer -> standard | simple
    logits: dict[int, dict] = field(default_factory=dict)      # layer -> histogram (edges, counts, ...)
    context_ppl: dict[int, float] = field(default_factory=dict)


def _mean(value) -> float:
    if isinstance(value, (list, tuple)):
        flat = [float(v) for v in value]
        return sum(flat) / len(flat) if flat else math.nan
    return float(value)


def _details(doc: dict) -> dict:
    """Where the analysis sits: the runner's results entry (``results[i]``), or the top level."""
    for holder in [*(doc.get("results") or []), doc]:
        if isinstance(holder, dict) and ("attention" in holder or "context_length_perplexity" in holder):
            return holder
    return doc


def _layers(section) -> list[dict]:
    """A ``{"layers": [...]}`` section (or the bare list) as its per-layer entries."""
    entries = section.get("layers", []) if isinstance(section, dict) else (section or [])
    return [e for e in entries if isinstance(e, dict) and "layer" in e]


def _context_ppl(holder: dict, where: str) -> dict[int, float]:
    value = holder.get("context_length_perplexity") or {}
    value = value.get("perplexity", value) if isinstance(value, dict) else {}
    try:
        out = {int(k): float(v) for k, v in value.items()}
    except (TypeError, ValueError):
        raise LeanLMError(f"{where}: context_length_perplexity.perplexity must map lengths to perplexities") from None
    for metric, v in (holder.get("metrics") or {}).items():  # perplexity_ctx<L> where no mapping is given
        match = re.fullmatch(r"perplexity_ctx(\d+)", metric)
        if match:
            out.setdefault(int(match.group(1)), float(v))
    return out


def read_analysis(profile: str, run_id: str) -> Analysis:
    """results/<profile>/runs/<run_id>/analysis.json as an :class:`Analysis` (see the module docstring)."""
    path = paths.results_dir(profile) / "runs" / run_id / "analysis.json"
    if not path.is_file():
        raise LeanLMError(f"{path} does not exist: run the analysis job of run {run_id} first "
                          f"(`leanlm finetune --run {run_id} --family analysis`)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LeanLMError(f"{path}: not readable JSON ({exc}); delete it and rerun its analysis job") from None
    holder = _details(doc)
    attention = holder.get("attention") or {}
    layers = _layers(attention.get("indicators"))
    rows = {}
    for entry in layers:
        values = entry.get("mean", entry)
        if values:  # None: a layer without an attention map (MLP)
            rows[int(entry["layer"])] = {k: _mean(values[k]) if k in values else math.nan for k in INDICATORS}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(INDICATORS)).sort_index().astype(float)
    frame.index.name = "layer"
    logit_section = attention.get("logits") or {}
    shared = {k: logit_section[k] for k in ("edges", "magnitude")
              if isinstance(logit_section, dict) and k in logit_section}
    logits = {int(e["layer"]): {**shared, **e} for e in _layers(logit_section)}
    bad = [layer for layer, h in logits.items() if "edges" not in h or len(h["edges"]) != len(h.get("counts", [])) + 1]
    if bad:
        raise LeanLMError(f"{path}: logit histograms of layers {bad} need edges (one more than counts)")
    kinds = {int(e["layer"]): e["kind"] for e in layers if "kind" in e}
    return Analysis(run_id, frame, kinds, logits, _context_ppl(holder, str(path)))


# ----------------------------------------------------------------------------- pretrain.json
def read_history(profile: str, run_id: str) -> pd.DataFrame:
    """The training-loss curve of a run: columns step, loss (evaluation entries left out)."""
    path = paths.results_dir(profile) / "runs" / run_id / "pretrain.json"
    if not path.is_file():
        raise LeanLMError(f"{path} does not exist: pretrain run {run_id} first (`leanlm pretrain --run {run_id}`)")
    try:
        history = json.loads(path.read_text(encoding="utf-8")).get("history", [])
    except (OSError, json.JSONDecodeError) as exc:
        raise LeanLMError(f"{path}: not readable JSON ({exc}); rerun `leanlm pretrain --run {run_id}`") from None
    points = [(int(h["step"]), float(h["loss"])) for h in history if isinstance(h, dict) and "loss" in h]
    if not points:
        raise LeanLMError(f"{path}: key history holds no loss records; rerun `leanlm pretrain --run {run_id}` "
                          "with log_every below its number of steps")
    return pd.DataFrame(points, columns=["step", "loss"])


# ----------------------------------------------------------------------------- sizes and captions
def size_label(run: Run) -> str:
    """'70M', '160M', '500M', '1.7B' read from the run's size key or name, else the size key."""
    for text in (run.size, run.name):
        match = re.search(r"(\d+(?:[._]\d+)?)([mb])(?![a-z])", text.lower())
        if match:
            return match.group(1).replace("_", ".") + match.group(2).upper()
    return run.size


def size_order(run: Run) -> int:
    m = run.model
    return int(m.get("n_layers", 0)) * int(m.get("d_model", 0)) ** 2


def scale_note(config: dict, rows: Sequence[Ch4Row]) -> str:
    """What scale a chapter 4 table's numbers come from, for captions."""
    from leanlm.modeling.qwen_sizes import TABLE_4_10

    hub = config.get("source") == "hub"
    shapes = []
    for row in rows:
        m = row.run.model
        shape = (m["n_layers"], m["d_model"], m["n_heads"], m["head_dim"], m.get("n_kv_heads") or m["n_heads"])
        if shape not in shapes:
            shapes.append(shape)
    described = "; ".join(f"{n} layers, d={d} ({h} heads of {hd}" + (f", {kv} KV heads)" if kv != h else ")")
                          for n, d, h, hd, kv in shapes)
    data = ("SlimPajama and lm-eval's tasks (Hugging Face hub)" if hub
            else "packaged stand-in data (lm-eval local tasks in place of the thesis's benchmarks)")
    thesis = {(r["layers"], r["hidden"]) for r in TABLE_4_10.values()}
    at_scale = hub and all((n, d) in thesis for n, d, *_ in shapes)
    note = f"{config['profile']} profile: {described}, {data}"
    return note if at_scale else note + "; not comparable in magnitude to the thesis"
