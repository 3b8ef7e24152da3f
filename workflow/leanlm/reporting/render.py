"""Table rendering: results -> paper_tables/<profile>/<name>.tex and <name>.csv.

Each thesis table is one function registered in :data:`TABLES` plus one template,
workflow/templates/<name>.tex.j2. The function reads the tidy results (results/<profile>/all_runs.csv),
checks that every run and task the table needs is there (tables come from real runs only), computes
the reproduced numbers with :mod:`leanlm.reporting.derived`, puts the thesis's printed numbers
(:mod:`leanlm.reporting.reported`) beside them, and returns a :class:`Table`: the frame written as
CSV (full precision) and the context of the template (formatted cells: "mean (std)", best in bold).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from leanlm import paths
from leanlm.config import Run, runs
from leanlm.errors import LeanLMError
from leanlm.io import atomic_path, write_text
from leanlm.registry import Registry
from leanlm.reporting import derived
from leanlm.reporting.aggregate import load
from leanlm.reporting.latex import Cell, render_template
from leanlm.reporting.reported import load_reported, order_key, parse_count, reported_row, thesis_label

log = logging.getLogger(__name__)


@dataclass
class Table:
    """A rendered table: ``frame`` goes to <name>.csv, ``context`` to the template <name>.tex.j2."""

    frame: pd.DataFrame
    context: dict = field(default_factory=dict)


TableFn = Callable[[str, dict, pd.DataFrame], Table]
TABLES: Registry[TableFn] = Registry("table")

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
def scale_note(config: dict, backbone: str) -> str:
    """What scale a profile's numbers come from, for captions."""
    m = config["models"][backbone]
    hub = config["source"] == "hub"
    data = "the thesis's datasets (Hugging Face hub)" if hub else "packaged stand-in data"
    text = (
        f"{config['profile']} profile: {m['n_layers']} layers, d={m['d_model']} "
        f"({m['n_heads']} heads of {m['head_dim']}), {data}"
    )
    at_thesis_scale = hub and all(m[k] == v for k, v in THESIS_SCALE.items())
    return text if at_thesis_scale else text + "; not comparable in magnitude to the thesis"


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
    csv = paths.results_dir(profile) / "all_runs.csv"
    keep = []
    for run in selected:
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


# ----------------------------------------------------------------------------- Table 3.1
# Table 3.1's benchmarks: task family -> printed header. A family shows up once the experiment
# fine-tunes on it (params/experiments/ch3.yaml, key finetune).
TABLE_3_1_FAMILIES = {"glue": "GLUE", "superglue": "SUPERGLUE", "squad_v1": "SQUAD v1.1", "squad_v2": "SQUAD v2.0"}


def reported_rows(reported: pd.DataFrame, selected: list[Run]) -> list[pd.Series | None]:
    """The thesis's row for each run; None for runs the thesis has no row of (e.g. a renamed variant)."""
    return [reported_row(reported, r.attention) if r.name == r.attention else None for r in selected]


def _thesis_count_notes(selected: list[Run], rep_rows: list, cells: list[Cell]) -> list[dict]:
    """Footnotes where the thesis's printed #params is not its own count rounded (MHA: 28.32M vs 28,311,552).

    The count is taken from the variant built at the thesis's scale; the note's mark goes on ``cells``.
    """
    # Imported here: analytic imports this module (write_table, cell helpers).
    from leanlm.reporting.analytic import block_parameters

    notes = []
    for i, (run, row) in enumerate(zip(selected, rep_rows)):
        if row is None:
            continue
        per_block = block_parameters(run.attention, THESIS_SCALE["n_heads"], THESIS_SCALE["head_dim"])
        exact = THESIS_SCALE["n_layers"] * per_block
        if fmt_count(exact) != row["params"]:
            mark = "abcdefgh"[len(notes)]
            cells[i] = Cell(cells[i].text, cells[i].bold, mark)
            notes.append({
                "mark": mark,
                "text": f"The thesis prints {row['params']} for {thesis_label(run.attention)}; its attention "
                        f"weights at BERT-base count {exact:,} ({fmt_count(exact)}).",
            })
    return notes


@TABLES.register("table_3_1")
def table_3_1(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-only results with PRR and PEoP (Table 3.1), reproduced beside the thesis's."""
    experiment = "ch3_encoder"
    selected = experiment_runs(config, experiment, "table_3_1")
    fine_tuned = config["_matrix"][experiment]["finetune"]
    families = [f for f in TABLE_3_1_FAMILIES if f in fine_tuned]
    if not families:
        raise LeanLMError(f"table_3_1: experiment {experiment} fine-tunes on none of {', '.join(TABLE_3_1_FAMILIES)}")
    rep_rows = reported_rows(load_reported("table_3_1"), selected)
    run_ids = [r.run_id for r in selected]
    summaries = {}
    for family in families:
        tasks = config["finetune"][family]["tasks"]
        primary = require_results(tidy, profile, "table_3_1", selected, family, tasks, config["seeds"])
        summary = derived.with_efficiency(derived.family_summary(primary, family, tasks))
        summaries[family] = summary.set_index("run_id").loc[run_ids]

    def printed(column: str) -> list:
        return [math.nan if row is None else row[column] for row in rep_rows]

    # #params: attention weights, the same for every family; then score, PRR, PEoP per family.
    params = summaries[families[0]]["params_attention"].to_numpy()
    printed_params = ["-" if row is None else row["params"] for row in rep_rows]
    frame = pd.DataFrame({
        "attention": [run_label(r) for r in selected], "run_id": run_ids,
        "n_seeds": summaries[families[0]]["n_seeds"].to_numpy(), "params_attention": params,
        "reported_params": ["" if p == "-" else p for p in printed_params],
    })
    ours = [column_cells([fmt_count(p) for p in params], params, False, 0)]
    thesis = [column_cells(printed_params, [parse_count(p) for p in printed_params], False, 2)]
    mha = [i for i, r in enumerate(selected) if r.name == "mha"]  # PRR's reference does not compete
    sha = [i for i, r in enumerate(selected) if r.name == "sha"]  # nor does PEoP's
    for family, s in summaries.items():
        mean, std, prr_, peop_ = (s[c].to_numpy() for c in ("mean", "std", "prr", "peop"))
        frame[f"{family}_mean"], frame[f"{family}_std"] = mean, std
        frame[f"{family}_prr"], frame[f"{family}_peop"] = prr_, peop_
        ours += [
            column_cells([fmt_mean_std(m, sd) for m, sd in zip(mean, std)], mean, True, 1),
            column_cells([fmt_number(v, 1) for v in prr_], prr_, True, 1, exclude=mha),
            column_cells([fmt_number(v, 2) for v in peop_], peop_, True, 2, exclude=sha),
        ]
        for metric, digits, exclude in (("acc", 1, ()), ("prr", 1, mha), ("peop", 2, sha)):
            values = printed(f"{family}_{metric}")
            frame[f"reported_{family}_{metric}"] = values
            thesis.append(column_cells([fmt_number(v, digits) for v in values], values, True, digits, exclude))

    notes = _thesis_count_notes(selected, rep_rows, thesis[0])
    context = {
        "profile": profile,
        "scale": scale_note(config, config["_matrix"][experiment]["backbone"]),
        "n_seeds": len(config["seeds"]),
        "families": [{"title": TABLE_3_1_FAMILIES[f], "metric": "Acc"} for f in families],
        "width": 1 + 3 * len(families),
        "rows": [{"label": Cell(frame["attention"][i]), "cells": [c[i] for c in ours] + [c[i] for c in thesis]}
                 for i in range(len(selected))],
        "notes": notes,
    }
    return Table(frame=frame, context=context)


# ----------------------------------------------------------------------------- Table 3.5
@TABLES.register("table_3_5")
def table_3_5(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Per-task GLUE results of the encoder-only models (Table 3.5), each row above the thesis's."""
    from leanlm.data.tasks import get_task

    experiment, family = "ch3_encoder", "glue"
    selected = experiment_runs(config, experiment, "table_3_5")
    tasks, seeds = config["finetune"][family]["tasks"], config["seeds"]
    primary = require_results(tidy, profile, "table_3_5", selected, family, tasks, seeds)
    per_task = derived.task_summary(primary, family).set_index(["run_id", "task"])
    average = derived.family_summary(primary, family, tasks).set_index("run_id")
    rep_rows = reported_rows(load_reported("table_3_5"), selected)

    frame = pd.DataFrame({"attention": [run_label(r) for r in selected], "run_id": [r.run_id for r in selected]})
    ours, thesis = [], []
    for column in [*tasks, "glue_avg"]:
        if column == "glue_avg":
            mean, std = (average.loc[frame["run_id"], c].to_numpy() for c in ("mean", "std"))
        else:
            rows = per_task.loc[[(r, column) for r in frame["run_id"]]]
            mean, std = rows["mean"].to_numpy(), rows["std"].to_numpy()
        frame[f"{column}_mean"], frame[f"{column}_std"] = mean, std
        ours.append(column_cells([fmt_mean_std(m, sd) for m, sd in zip(mean, std)], mean, True, 1))
        rep_mean = [math.nan if r is None or column not in r else r[column] for r in rep_rows]
        rep_std = [math.nan if r is None or f"{column}_std" not in r else r[f"{column}_std"] for r in rep_rows]
        frame[f"reported_{column}"], frame[f"reported_{column}_std"] = rep_mean, rep_std
        thesis.append(column_cells([fmt_mean_std(m, sd) for m, sd in zip(rep_mean, rep_std)], rep_mean, True, 1))

    rows = [
        {"label": Cell(frame["attention"][i]), "cells": [c[i] for c in ours],
         "reported": None if rep_rows[i] is None else [c[i] for c in thesis]}
        for i in range(len(selected))
    ]
    context = {
        "profile": profile,
        "scale": scale_note(config, config["_matrix"][experiment]["backbone"]),
        "n_seeds": len(seeds),
        "headers": [get_task(t).thesis_name for t in tasks] + ["GLUE Avg."],
        "rows": rows,
    }
    return Table(frame=frame, context=context)


# ----------------------------------------------------------------------------- writing
def write_table(profile: str, name: str, table: Table) -> list[Path]:
    """Write paper_tables/<profile>/<name>.tex (from <name>.tex.j2) and <name>.csv, atomically."""
    out_dir = paths.tables_dir(profile)
    tex = render_template(f"{name}.tex.j2", name=name, **table.context)
    tex_path = write_text(out_dir / f"{name}.tex", tex)
    csv_path = out_dir / f"{name}.csv"
    with atomic_path(csv_path, suffix=".csv") as tmp:
        table.frame.to_csv(tmp, index=False)
    log.info("rendered %s and %s", tex_path, csv_path)
    return [tex_path, csv_path]


def render_table(profile: str, name: str, config: dict) -> list[Path]:
    """Render table ``name`` of ``profile`` from results/<profile>/all_runs.csv; return the files written."""
    build = TABLES.get(name)
    if config.get("profile", profile) != profile:
        raise LeanLMError(f"render_table: config is profile {config['profile']!r}, asked for {profile!r}")
    return write_table(profile, name, build(profile, config, load(profile)))


def main(profile: str, name: str) -> list[Path]:
    """Load params/<profile>.yaml (validated) and render table ``name``."""
    from leanlm.config import load_config

    config = load_config(paths.params_dir() / f"{profile}.yaml")
    return render_table(profile, name, config)
