"""Table rendering: results -> paper_tables/<profile>/<name>.tex and <name>.csv.

Each thesis table is one function (registered by dotted path: :data:`TABLES`) plus a template: its own
workflow/templates/<name>.tex.j2, or the one its context names (``context["template"]``, most
often the generic grid_table.tex.j2 of :mod:`leanlm.reporting.grid`; params/tables.yaml says the
same under ``template:`` for Snakemake). The function reads the tidy results of the table's experiments
(results/<profile>/experiments/<experiment>.csv, :mod:`leanlm.reporting.aggregate`),
checks that every run and task the table needs is there (tables come from real runs only), computes
the reproduced numbers with :mod:`leanlm.reporting.derived`, puts the thesis's printed numbers
(:mod:`leanlm.reporting.reported`) beside them, and returns a :class:`Table`: the frame written as
CSV (full precision) and the context of the template (formatted cells: "mean (std)", best in bold).

Tables that need no results, only the profile's params (hyperparameter tables 3.11, 3.12), are
registered in :data:`PARAMS_TABLES` and take ``(profile, config)``. The chapters' tables live in
their chapter's folder (:mod:`leanlm.reporting.ch2`, ``ch3``, ``ch4``) and are named by dotted path in
params/tables.yaml (``renderer:``); this module never imports them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from leanlm import paths
from leanlm.errors import DataError, LeanLMError
from leanlm.io import atomic_path, write_text
from leanlm.registry import DottedRegistry
from leanlm.reporting.aggregate import load
from leanlm.reporting.latex import Cell, render_template
from leanlm.reporting.reported import order_key, thesis_label
from leanlm.runs import PRETRAIN_SEED, Run, runs

log = logging.getLogger(__name__)


@dataclass
class Table:
    """A rendered table: ``frame`` goes to <name>.csv, ``context`` to the template <name>.tex.j2."""

    frame: pd.DataFrame
    context: dict = field(default_factory=dict)


TableFn = Callable[[str, dict, pd.DataFrame], Table]


def renderers(kind: str) -> dict[str, str]:
    """params/tables.yaml's items of ``kind`` (results, params, analytic) -> their ``renderer`` dotted path
    (each checked to be a function of leanlm's reporting package: :mod:`leanlm.reporting.tables_file`)."""
    from leanlm.reporting.tables_file import load_tables

    return {name: spec["renderer"] for name, spec in load_tables().items() if spec["kind"] == kind}


# Registered by dotted path in params/tables.yaml (``renderer:``) and imported only when rendered: a
# chapter's renderers live in leanlm/reporting/ch2, ch3, ch4, which import this module, never the reverse.
# Also chapter 4's figures drawn from runs (tables.yaml kind results, outputs pdf/png/csv): they write
# their own files and return the paths instead of a Table.
TABLES: DottedRegistry[TableFn] = DottedRegistry("table", lambda: renderers("results"), within="leanlm.reporting")
# Tables rendered from the params file alone (tables.yaml kind: params).
PARAMS_TABLES: DottedRegistry[Callable[[str, dict], Table]] = DottedRegistry("params table", lambda: renderers("params"),
                                                                             within="leanlm.reporting")

# The thesis's benchmark scale (§3.4.3): the 12-layer BERT-base with 12 heads of 64.
THESIS_SCALE = {"n_layers": 12, "n_heads": 12, "head_dim": 64}


# ----------------------------------------------------------------------------- formatting
def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_number(value, digits: int = 1) -> str:
    """``value`` with ``digits`` decimals, or "-" where there is none (as the thesis prints)."""
    return "-" if is_missing(value) else f"{float(value):.{digits}f}"


def fmt_mean_std(mean, std, digits: int = 1) -> str:
    """"81.9 (0.3)"; just "81.9" when the std is undefined (a single seed)."""
    if is_missing(mean):
        return "-"
    return fmt_number(mean, digits) if is_missing(std) else f"{mean:.{digits}f} ({std:.{digits}f})"


def fmt_count(n) -> str:
    """A parameter count as the thesis prints it: 8.85M, 14.34K, 1.20B, or the integer if small."""
    if is_missing(n):
        return "-"
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(int(n))


def best_flags(values: Sequence, higher_is_better: bool, digits: int, exclude: Sequence[int] = ()) -> list[bool]:
    """Which entries are best in their column, compared as printed (ties are all bold).

    ``exclude`` holds row positions that do not compete (the reference of a ratio, e.g. MHA for PRR).
    """
    shown = [None if is_missing(v) or i in exclude else round(float(v), digits) for i, v in enumerate(values)]
    candidates = [v for v in shown if v is not None]
    if len(set(candidates)) < 2:  # one entry, or all equal: nothing stands out
        return [False] * len(values)
    target = max(candidates) if higher_is_better else min(candidates)
    return [v is not None and v == target for v in shown]


def column_cells(texts: Sequence[str], values: Sequence, higher_is_better: bool, digits: int,
                 exclude: Sequence[int] = ()) -> list[Cell]:
    flags = best_flags(values, higher_is_better, digits, exclude)
    return [Cell(t, bold=b) for t, b in zip(texts, flags)]


# ----------------------------------------------------------------------------- shared checks
@lru_cache(maxsize=4)
def _paper_config(params_file: str) -> dict:
    from leanlm.config import load_config

    return load_config(params_file)


def paper_config() -> dict:
    """The validated paper profile (params/paper.yaml of the project root)."""
    path = paths.params_dir() / "paper.yaml"
    if not path.is_file():
        raise LeanLMError(f"{path} does not exist: the thesis-scale parameter counts are taken from it")
    return _paper_config(str(path))


def _at_thesis_scale(backbone: str, model: dict) -> bool:
    """Whether ``model`` has the sizes of the paper profile's model of that name (the thesis's own)."""
    try:
        paper = paper_config()["models"].get(backbone)
    except LeanLMError:
        paper = None
    if paper is None:  # no paper profile to compare with: BERT-base's heads are the reference
        return all(model[k] == v for k, v in THESIS_SCALE.items())
    keys = ("n_layers", "n_decoder_layers", "d_model", "n_heads", "head_dim")
    return all(model.get(k, 0) == paper.get(k, 0) for k in keys)


def scale_note(config: dict, backbone: str) -> str:
    """What scale a profile's numbers come from, for captions."""
    m = config["models"][backbone]
    hub = config["source"] == "hub"
    data = "the thesis's datasets (Hugging Face hub)" if hub else "packaged stand-in data"
    layers = f"{m['n_layers']}+{m['n_decoder_layers']}" if m.get("n_decoder_layers") else str(m["n_layers"])
    text = (
        f"{config['profile']} profile: {layers} layers, d={m['d_model']} "
        f"({m['n_heads']} heads of {m['head_dim']}), {data}"
    )
    return text if hub and _at_thesis_scale(backbone, m) else text + "; not comparable in magnitude to the thesis"


def experiment_runs(config: dict, experiment: str, table: str) -> list[Run]:
    """The runs of ``experiment`` in thesis row order (SHA, MHA, EL-ATT, ...), or a clear error."""
    if experiment not in config.get("_matrix", {}):
        raise LeanLMError(
            f"{table} needs experiment {experiment!r}, which profile {config['profile']!r} does not run; "
            f"add it to key experiments of {config.get('_params_file', 'the profile')}"
        )
    selected = [r for r in runs(config) if r.experiment == experiment]
    position = {r.run_id: i for i, r in enumerate(selected)}
    return sorted(selected, key=lambda r: (order_key(r.attention), position[r.run_id]))


def run_label(run: Run) -> str:
    """The thesis's label; a run that is not simply its attention (e.g. a larger MHA) says its name."""
    label = thesis_label(run.attention)
    return label if run.name == run.attention else f"{label} ({run.name})"


def require_results(tidy: pd.DataFrame, profile: str, table: str, selected: list[Run], family: str,
                    tasks: Sequence[str], seeds: Sequence[int]) -> pd.DataFrame:
    """The primary-metric rows of ``family`` for ``selected`` runs, tasks and seeds; error if any is missing."""
    from leanlm.reporting.aggregate import piece_path

    keep = []
    for run in selected:
        csv = piece_path(profile, run.experiment)
        source = paths.results_dir(profile) / "runs" / run.run_id / f"{family}.json"
        rows = tidy[(tidy["run_id"] == run.run_id) & (tidy["family"] == family) & tidy["is_primary"].astype(bool)]
        if rows.empty:
            raise LeanLMError(
                f"{table} needs run {run.run_id} on {family}, but {csv} has no results of it: {source} is "
                f"missing. Run its fine-tuning job (`leanlm finetune --run {run.run_id} --family {family}`), "
                "then `leanlm aggregate`"
            )
        have = set(zip(rows["task"], rows["seed"].astype(int)))
        missing = [(t, s) for t in tasks for s in seeds if (t, s) not in have]
        if missing:
            listed = ", ".join(f"{t} seed {s}" for t, s in missing[:6])
            raise LeanLMError(
                f"{table}: {source} lacks {len(missing)} task/seed results of the profile ({listed}); "
                f"rerun `leanlm finetune --run {run.run_id} --family {family}`, then `leanlm aggregate`"
            )
        keep.append(rows[rows["task"].isin(tasks) & rows["seed"].isin(seeds)])
    return pd.concat(keep, ignore_index=True)


# ----------------------------------------------------------------------------- writing
def write_table(profile: str, name: str, table: Table) -> list[Path]:
    """Write paper_tables/<profile>/<name>.tex and <name>.csv, atomically.

    The template is ``table.context["template"]`` when given (e.g. grid_table.tex.j2), else <name>.tex.j2.
    """
    out_dir = paths.tables_dir(profile)
    context = {k: v for k, v in table.context.items() if k != "template"}
    tex = render_template(table.context.get("template") or f"{name}.tex.j2", name=name, **context)
    tex_path = write_text(out_dir / f"{name}.tex", tex)
    csv_path = out_dir / f"{name}.csv"
    with atomic_path(csv_path, suffix=".csv") as tmp:
        table.frame.to_csv(tmp, index=False)
    log.info("rendered %s and %s", tex_path, csv_path)
    return [tex_path, csv_path]


def check_aggregated_settings(profile: str, config: dict, tidy: pd.DataFrame) -> None:
    """Refuse results aggregated under other settings than ``config`` gives now (issue 24, case 10).

    ``leanlm aggregate`` checks each record against the profile and writes the fingerprint of the settings
    it checked (:func:`leanlm.record_settings.settings_hash`) into column ``settings_hash``; a table
    rendered by hand after a profile edit would caption those results with the new settings. Every
    (run, family) the profile runs that the tidy table holds must carry the fingerprint the profile gives
    now. Where one differs, the run's results file says what changed (or, where it matches the profile,
    that the experiment's aggregated piece is older than it)."""
    from leanlm.record_settings import RecordChecker, read_record, settings_hash
    from leanlm.reporting.aggregate import piece_path

    params_file = config.get("_params_file", f"params/{profile}.yaml")
    aggregate = f"`leanlm aggregate --params {params_file}`"
    csv = ", ".join(str(piece_path(profile, e)) for e in sorted(set(tidy["experiment"]))) or "the aggregated results"
    if "settings_hash" not in tidy.columns:
        raise DataError(f"{csv} has no column settings_hash: it was written by an older leanlm, whose aggregation did "
                        f"not check the results against the profile's settings; run {aggregate}")
    fingerprints = tidy["settings_hash"].fillna("").astype(str)
    for run in runs(config):
        for family in run.finetune:
            found = set(fingerprints[(tidy["run_id"] == run.run_id) & (tidy["family"] == family)])
            if not found or found == {settings_hash(config, run, family)}:
                continue
            csv = piece_path(profile, run.experiment)
            how = ("without the profile (its results were not checked against it)" if found == {""}
                   else f"under other settings than {params_file} gives now")
            head = f"{csv}: the results of run {run.run_id} on {family} were aggregated {how}"
            record = paths.results_dir(profile) / "runs" / run.run_id / f"{family}.json"
            if record.is_file():
                try:
                    RecordChecker(config).family(read_record(record), record)
                except DataError as stale:
                    raise DataError(f"{head}. {stale}; then run {aggregate}") from None
                raise DataError(f"{head}, but its results file {record} matches the profile: {csv} is older than "
                                f"it. Run {aggregate}")
            raise DataError(
                f"{head}, so this table would caption them with settings they were not made with. Run {aggregate} "
                "(after `snakemake`, or the jobs whose settings changed: it refuses results that do not match the "
                "profile)")


def table_experiments(name: str, config: dict) -> list[str]:
    """The experiments whose results table ``name`` reads: params/tables.yaml's ``experiments`` and
    ``optional`` that the profile runs (one it needs but does not run, its renderer names)."""
    from leanlm.reporting.tables_file import load_tables

    spec = load_tables()[name]
    listed = spec["experiments"] + spec.get("optional", [])
    return [e for e in dict.fromkeys(listed) if e in config["experiments"]]


def _check_experiments_run(name: str, config: dict) -> None:
    """LeanLMError naming the profile's key if it does not run an experiment table ``name`` needs."""
    from leanlm.reporting.tables_file import load_tables

    for experiment in load_tables()[name]["experiments"]:
        if experiment not in config.get("_matrix", {}):
            experiment_runs(config, experiment, name)  # raises the error that names the key to add


def first_replicas(tidy: pd.DataFrame) -> pd.DataFrame:
    """The rows of the models pretrained with the first seed: a table shows one pretrained model per row, as
    the thesis's do; the further pretraining replicas (profile key pretrain_seeds) are the claims' to read."""
    if "pretrain_seed" not in tidy.columns:  # aggregated before replicas existed: every row is a first one
        return tidy
    # a row without a seed (a piece aggregated before replicas existed, beside newer ones) is a first one too
    seeds = pd.to_numeric(tidy["pretrain_seed"], errors="coerce").fillna(PRETRAIN_SEED).astype(int)
    return tidy[seeds == PRETRAIN_SEED].reset_index(drop=True)


def render_table(profile: str, name: str, config: dict, verify_settings: bool = False) -> list[Path]:
    """Render table ``name`` of ``profile`` from the results of its experiments
    (results/<profile>/experiments/<experiment>.csv: :func:`table_experiments`; a params table: from
    ``config`` alone); return the files written. ``verify_settings`` (the CLI's renders, by hand or by
    Snakemake): refuse results aggregated under other settings (:func:`check_aggregated_settings`)."""
    if config.get("profile", profile) != profile:
        raise LeanLMError(f"render_table: config is profile {config['profile']!r}, asked for {profile!r}")
    if name in PARAMS_TABLES:
        return write_table(profile, name, PARAMS_TABLES.get(name)(profile, config))
    renderer = TABLES.get(name)  # an unknown table is named before anything is read
    _check_experiments_run(name, config)  # a profile without them is named before any results are read
    tidy = first_replicas(load(profile, table_experiments(name, config)))
    if verify_settings:
        check_aggregated_settings(profile, config, tidy)
    built = renderer(profile, config, tidy)
    # A results *figure* (ch. 4) draws and writes its own files and returns their paths.
    return write_table(profile, name, built) if isinstance(built, Table) else list(built)


def main(profile: str, name: str) -> list[Path]:
    """Load params/<profile>.yaml (validated) and render table ``name``, its results checked against it."""
    from leanlm.config import load_config

    config = load_config(paths.params_dir() / f"{profile}.yaml")
    return render_table(profile, name, config, verify_settings=True)
