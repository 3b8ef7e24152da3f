"""Shared pieces of chapter 2's results tables: which run is which thesis row, and what its records say.

The ch. 2 matrix (params/experiments/ch2.yaml) names its runs ``bert_mlm``, ``md5_proj``, ...;
:data:`CH2_MODELS` maps each name to the row the thesis prints (group, label, and its key in each
reported CSV), in the thesis's row order. Every run fine-tunes the ``glue`` family, with the
profile's ``finetune.glue`` block and the variant its experiment names laid over it
(``finetune_variants: {glue: glue_ch2}``: Table 2.5's settings, and possibly its own seeds).

Besides the tidy table, ch. 2 reads each run's records (results/<profile>/runs/<run_id>/):

- ``pretrain.json``: ``hardware``, ``model`` (Tables 2.3 and side-by-side time pretraining from the speed
  record instead, :mod:`leanlm.reporting.pretraining_speed`);
- ``glue.json``: ``timing.inference_seconds_per_sample`` (one number, or one per task), ``hardware``,
  ``model`` (the pretrained model's config: Table 2.2's counts are made from it).

A run the profile cannot run (CANINE-C without the hub) is in ``config["absent_runs"]`` (run_id ->
reason; :func:`leanlm.runs.runs` leaves it out): its row is kept, with "-" and the reason as a
footnote, instead of failing the table or silently dropping the row.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.reporting import derived
from leanlm.reporting.render import require_results
from leanlm.runs import Run, runs

FAMILY = "glue"
# The baseline of PRR, PCR and speed-up (§2.4.4): BERT-MLM of the main experiment.
MAIN, SUBWORD, RELATED = "ch2_hashformers", "ch2_subword", "ch2_related"
BASELINE = "bert_mlm"
# Not pretrained by the pipeline: CANINE-C is the hub checkpoint, ProFormer trains on the task only.
NOT_PRETRAINED = ("canine_c", "proformer")
NOT_PRETRAINED_OBJECTIVES = ("none", "hub")


@dataclass(frozen=True)
class Ch2Model:
    """A ch. 2 row: its group heading, label, and its row keys in params/reported/table_2_1 and 2_3."""

    group: str
    label: str
    reported: str = ""       # table_2_1 / table_2_2 key ("" = the thesis has no such row)
    speed: str = ""          # table_2_3 key
    token: str = "word"      # Table 2.1's Token column (from the run's tokenizer where it has one)

    @property
    def full_label(self) -> str:
        return f"{self.group}-{self.label}" if self.group.startswith("HashFormers") else self.label


def _hashformers() -> dict[str, Ch2Model]:
    out = {}
    for prefix, group in (("md5", "HashFormers-MD"), ("lsh", "HashFormers-LSH")):
        for suffix, label, speed in (("emb_50k", "Emb (50K)", "Emb"), ("emb_1k", "Emb (1K)", "Emb"),
                                     ("pool", "Pool", "Pool"), ("add", "Add", "Add"), ("proj", "Proj", "Proj")):
            out[f"{prefix}_{suffix}"] = Ch2Model(group, label, f"{group}-{label}", f"HASHFORMERS-{speed}")
    return out


CH2_MODELS: dict[str, Ch2Model] = {
    "bert_mlm": Ch2Model("Baselines", "BERT-MLM", "BERT-MLM", "BERT-MLM", "subword"),
    "bert_sr": Ch2Model("Baselines", "BERT-S+R", "BERT-S+R", "BERT-S+R", "subword"),
    "canine_c": Ch2Model("Baselines", "CANINE-C", "CANINE-C", "CANINE-C", "Unicode"),
    "proformer": Ch2Model("Baselines", "ProFormer", "ProFormer", "", "word"),
    **_hashformers(),
    "bert_hash_femto": Ch2Model("Related hash embeddings", "BERT-Hash femto", token="subword"),
    "bert_hash_pico": Ch2Model("Related hash embeddings", "BERT-Hash pico", token="subword"),
    "bert_hash_nano": Ch2Model("Related hash embeddings", "BERT-Hash nano", token="subword"),
    "eelbert": Ch2Model("Related hash embeddings", "EELBERT"),
}
ORDER = list(CH2_MODELS)


# Table 2.1's Token column from the run's tokenizer (params/experiments/ch2.yaml): words hashed, or
# subword pieces (looked up, or hashed as strings: Table 2.6's BPE rows).
TOKEN_OF_TOKENIZER = {"hash": "word", "hash_subword": "subword", "profile": "subword", "bpe": "subword"}


def model_of(run: Run) -> Ch2Model:
    """The thesis row of ``run``; a run the thesis lacks gets its own name and no printed row."""
    known = CH2_MODELS.get(run.name) or Ch2Model("Other", run.name.replace("_", "-"))
    if run.name == "canine_c":  # Unicode code points, whatever tokenizer feeds the data path
        return known
    token = TOKEN_OF_TOKENIZER.get(run.tokenizer, known.token)
    return Ch2Model(known.group, known.label, known.reported, known.speed, token)


def absent_runs(config: dict) -> dict[str, str]:
    """run_id -> why the profile does not run it (``config["absent_runs"]``; none when unset)."""
    return dict(config.get("absent_runs") or {})


def _placeholder(config: dict, experiment: str, name: str) -> Run:
    """A Run standing for an absent run's row (it has no model: nothing of it is read)."""
    spec = config["_matrix"][experiment]
    fields = {**spec.get("defaults", {}), **spec["runs"][name]}
    return Run(experiment=experiment, name=name, backbone=spec["backbone"],
               objective=fields.get("objective", spec["objective"]), finetune=tuple(spec["finetune"]), model={})


def select_runs(config: dict, experiment: str, table: str) -> list[Run]:
    """The runs of ``experiment`` in the thesis's row order, absent ones included (as placeholders),
    or an error naming the experiment the profile lacks."""
    if experiment not in config.get("_matrix", {}):
        raise LeanLMError(
            f"{table} needs experiment {experiment!r}, which profile {config['profile']!r} does not run; "
            f"add it to key experiments of {config.get('_params_file', 'the profile')}"
        )
    absent = absent_runs(config)
    by_name = {r.name: r for r in runs(config) if r.experiment == experiment and r.run_id not in absent}
    selected = []
    for position, name in enumerate(config["_matrix"][experiment]["runs"]):
        if name in by_name:
            selected.append((position, by_name[name]))
        elif f"{experiment}-{name}" in absent:
            selected.append((position, _placeholder(config, experiment, name)))
    return [run for _, run in sorted(selected, key=_row_order)]


def _row_order(item: tuple[int, Run]) -> tuple[int, int]:
    """Thesis order first (CH2_MODELS), then the matrix's for names the thesis does not have."""
    position, run = item
    return (ORDER.index(run.name) if run.name in ORDER else len(ORDER), position)


def require_named(selected: Sequence[Run], name: str, table: str, experiment: str) -> Run:
    for run in selected:
        if run.name == name:
            return run
    raise LeanLMError(f"{table} needs run {name!r} of experiment {experiment} (its baseline), which the matrix "
                      "(params/experiments/ch2.yaml) does not define; add it back")


# ----------------------------------------------------------------------------- fine-tuning settings
def finetune_variant(config: dict) -> str:
    """The profile's finetune_variants block the thesis's ch. 2 experiments lay over finetune.glue ("" if
    none); not ch2_bert_hash_card's, which fine-tunes with the BERT-Hash card's settings, not Table 2.5's."""
    matrix = config.get("_matrix", {})
    for name in (MAIN, SUBWORD, RELATED):
        if name not in matrix:
            continue
        variant = (matrix[name].get("finetune_variants") or {}).get(FAMILY)
        if variant:
            return variant
    return ""


def glue_settings(config: dict) -> dict:
    """finetune.glue with the ch. 2 variant laid over it: what the ch. 2 runs fine-tune with (Table 2.5)."""
    if FAMILY not in config["finetune"]:
        raise LeanLMError(f"{config.get('_params_file', 'the profile')}: chapter 2 fine-tunes GLUE, but key "
                          f"finetune has no {FAMILY} block; add finetune.{FAMILY}")
    variant = finetune_variant(config)
    return {**config["finetune"][FAMILY], **(config.get("finetune_variants", {}).get(variant, {}) if variant else {})}


def glue_tasks(config: dict) -> list[str]:
    return list(config["finetune"][FAMILY]["tasks"])


def glue_seeds(config: dict) -> list[int]:
    """The ch. 2 fine-tuning seeds: the variant's ``seeds`` where it sets them, else the profile's."""
    return list(glue_settings(config).get("seeds", config["seeds"]))


# ----------------------------------------------------------------------------- GLUE scores
@dataclass
class GlueScores:
    """Per run_id: ``tasks`` (mean and std per task, printed units) and ``avg`` (mean, std, n_seeds)."""

    tasks: pd.DataFrame      # index run_id, columns <task>_mean, <task>_std
    avg: pd.DataFrame        # index run_id, columns mean, std, n_seeds


def glue_scores(tidy: pd.DataFrame, profile: str, config: dict, table: str, present: Sequence[Run]) -> GlueScores:
    """GLUE per task and its average (mean, sample std over seeds) of ``present`` runs; every run,
    task and seed must be in the tidy table (a clear error names the one that is not)."""
    tasks = glue_tasks(config)
    primary = require_results(tidy, profile, table, list(present), FAMILY, tasks, glue_seeds(config))
    ids = [r.run_id for r in present]
    per_task = derived.task_summary(primary, FAMILY)
    wide = {}
    for stat in ("mean", "std"):
        pivot = per_task.pivot(index="run_id", columns="task", values=stat)
        for task in tasks:
            wide[f"{task}_{stat}"] = pivot[task]
    task_frame = pd.DataFrame(wide).reindex(ids)
    avg = derived.family_summary(primary, FAMILY, tasks).set_index("run_id").reindex(ids)
    return GlueScores(task_frame, avg[["mean", "std", "n_seeds"]])


# ----------------------------------------------------------------------------- run records
def record_path(profile: str, run_id: str, kind: str) -> Path:
    return paths.results_dir(profile) / "runs" / run_id / f"{kind}.json"


def read_record(profile: str, run_id: str, kind: str, required: bool = True) -> dict | None:
    """results/<profile>/runs/<run_id>/<kind>.json (kind: pretrain | glue), or None if not required."""
    path = record_path(profile, run_id, kind)
    if not path.is_file():
        if not required:
            return None
        job = (f"leanlm pretrain --run {run_id}" if kind == "pretrain"
               else f"leanlm finetune --run {run_id} --family {kind}")
        raise LeanLMError(f"{path} is missing: chapter 2's tables read it (counts, timing, hardware); "
                          f"run `{job}`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LeanLMError(f"{path}: not a readable results JSON ({exc}); delete it and rerun its job") from None


def _get(record: dict, dotted: str) -> Any:
    value: Any = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def is_pretrained(run: Run) -> bool:
    """Whether the pipeline pretrains ``run`` (ProFormer: objective none; CANINE-C: the hub's checkpoint)."""
    return run.objective not in NOT_PRETRAINED_OBJECTIVES and run.name not in NOT_PRETRAINED


def inference_ms_per_sample(profile: str, run: Run) -> dict[str, float]:
    """Table 2.3's inference time (ms/sample) from glue.json: per task where its results hold
    ``inference_seconds`` and ``inference_examples`` (summed over seeds), else ``{"": overall}``."""
    path = record_path(profile, run.run_id, FAMILY)
    record = read_record(profile, run.run_id, FAMILY)
    seconds: dict[str, float] = {}
    examples: dict[str, float] = {}
    for result in record.get("results") or []:
        if isinstance(result, dict) and result.get("inference_examples"):
            task = str(result.get("task", ""))
            seconds[task] = seconds.get(task, 0.0) + float(result.get("inference_seconds", 0.0))
            examples[task] = examples.get(task, 0.0) + float(result["inference_examples"])
    if examples:
        return {task: 1000.0 * seconds[task] / examples[task] for task in examples}
    value = _get(record, "timing.inference_seconds_per_sample")
    if value is None:
        raise LeanLMError(f"{path} has no inference timing (timing.inference_seconds_per_sample, or "
                          f"inference_seconds per result) for Table 2.3; it is from an older version: rerun "
                          f"`leanlm finetune --run {run.run_id} --family glue`")
    return {"": 1000.0 * float(value)}


def hardware_of(profile: str, run: Run, kind: str) -> str | None:
    record = read_record(profile, run.run_id, kind, required=False)
    return None if record is None else record.get("hardware")


def model_dict(profile: str, run: Run) -> dict:
    """The trained model's config as recorded (glue.json, else pretrain.json), else the matrix's."""
    for kind in (FAMILY, "pretrain"):
        record = read_record(profile, run.run_id, kind, required=False)
        if record and isinstance(record.get("model"), dict):
            return record["model"]
    return dict(run.model)


def backbone_shape(model: dict) -> tuple:
    """What 'equal backbone' compares: layers, width, heads, FFN width."""
    return tuple(model.get(k) for k in ("n_layers", "d_model", "n_heads", "d_ff"))


# ----------------------------------------------------------------------------- parameter counts
def run_counts(profile: str, run: Run) -> tuple[float, float, str | None]:
    """(#Total, #Emb, note) of a run as Appendix 2.8 counts them, at the profile's scale.

    Counted on the trained model's recorded config, built on the meta device with a binary
    classification head (the Appendix's convention), exactly as :mod:`leanlm.reporting.ch2.counts`
    counts the thesis's scale. CANINE-C (a hub model, not ours) takes #Total from its record and
    #Emb from Eq. 2.10. Every other run counts as trained (ProFormer has no position or token-type table).
    """
    from leanlm.errors import ConfigError
    from leanlm.modeling.config import ModelConfig
    from leanlm.reporting.ch2 import counts as ch2_counts

    model = model_dict(profile, run)
    if run.name == "canine_c" or model.get("backbone", "bert") != "bert":
        record = read_record(profile, run.run_id, FAMILY)
        total = _get(record, "parameters.total")
        d = model.get("d_model") or model.get("hidden_size") or ch2_counts.D_MODEL
        emb = ch2_counts.CANINE_BUCKETS * d if run.name == "canine_c" else _get(record, "parameters.embedding")
        note = "#Emb by Eq. 2.10 (16,000 hash buckets x d); #Total as recorded" if run.name == "canine_c" else \
            "not our encoder: counts as its record gives them"
        return (math.nan if total is None else float(total)), (math.nan if emb is None else float(emb)), note
    try:
        config = ModelConfig.from_dict(model, where=f"{record_path(profile, run.run_id, FAMILY)} key model")
    except ConfigError as exc:
        raise LeanLMError(f"{exc}; rerun the run's jobs with the current version") from None
    total, emb = ch2_counts.counted(ch2_counts.classifier_on_meta(config))
    return float(total), float(emb), None
