"""Chapter 3's per-task tables (Appendix 3.8): Tables 3.5-3.10.

Two kinds, each one builder:

- mean (std) per task and the family average (Tables 3.5 and 3.6 encoder-only GLUE and SUPERGLUE,
  3.9 decoder-only GLUE). Where the profile also runs the larger encoders (ch3_encoder_large), their
  rows follow as the thesis's MHA(M) and MHE-MUL (M), below a rule and out of the race for bold.
- score with PEoP in parentheses per task (Tables 3.7, 3.8, 3.10): as the thesis marks them, the best
  score is underlined and the best PEoP bold.
"""

from __future__ import annotations

import math

import pandas as pd

from leanlm.data.tasks import get_task
from leanlm.reporting import derived
from leanlm.reporting.ch3.results import family_seeds, is_extra, label_cell, printed, seeds_phrase, thesis_rows
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.reported import load_reported
from leanlm.reporting.render import (
    Table,
    best_flags,
    column_cells,
    experiment_runs,
    fmt_mean_std,
    fmt_number,
    is_missing,
    require_results,
    run_label,
    scale_note,
)
from leanlm.runs import Run

FAMILY_TITLES = {"glue": "GLUE", "superglue": "SUPERGLUE"}
# Task -> its column in the reported CSVs where the names differ (SuperGLUE's RTE is our sg_rte).
REPORTED_TASK = {"sg_rte": "rte"}
LARGE_EXPERIMENT = {"ch3_encoder": "ch3_encoder_large"}
LARGE_SUFFIX = "(M)"


def _primary(tidy, profile, config, table, selected: list[Run], family: str) -> tuple[pd.DataFrame, list[str]]:
    tasks = list(config["finetune"][family]["tasks"])
    seeds = family_seeds(config, family, tasks)
    return require_results(tidy, profile, table, selected, family, tasks, seeds), tasks


def _headers(tasks: list[str]) -> list[Column]:
    return [Column(get_task(t).thesis_name, arrow="↓" if derived.lower_is_better(get_task(t).primary_metric) else "↑")
            for t in tasks]


def _mean_std_columns(tidy, profile, config, table, selected, family) -> tuple[list[str], dict]:
    """Per column (each task, then the family average): means and stds of ``selected``, in order."""
    primary, tasks = _primary(tidy, profile, config, table, selected, family)
    per_task = derived.task_summary(primary, family).set_index(["run_id", "task"])
    average = derived.family_summary(primary, family, tasks).set_index("run_id")
    ids = [r.run_id for r in selected]
    values = {}
    for task in tasks:
        rows = per_task.loc[[(r, task) for r in ids]]
        values[task] = (rows["mean"].to_numpy(), rows["std"].to_numpy())
    values[f"{family}_avg"] = (average.loc[ids, "mean"].to_numpy(), average.loc[ids, "std"].to_numpy())
    return tasks, values


def mean_std_table(profile: str, config: dict, tidy: pd.DataFrame, *, table: str, experiment: str,
                   family: str, what: str) -> Table:
    """Per-task mean (std) and the family average, each model above the thesis's row."""
    selected = experiment_runs(config, experiment, table)
    large_experiment = LARGE_EXPERIMENT.get(experiment)
    large = experiment_runs(config, large_experiment, table) if large_experiment in config["_matrix"] else []
    tasks, values = _mean_std_columns(tidy, profile, config, table, selected, family)
    if large:
        _, large_values = _mean_std_columns(tidy, profile, config, table, large, family)
        values = {k: tuple(list(v) + list(w) for v, w in zip(values[k], large_values[k])) for k in values}
    everyone = selected + large
    competing = len(selected)  # larger models do not compete for bold
    reported = load_reported(table)
    rep_rows = thesis_rows(reported, selected) + thesis_rows(reported, large, LARGE_SUFFIX)
    notes = Notes()
    frame = pd.DataFrame({
        "attention": [run_label(r) + (f" {LARGE_SUFFIX}" if i >= competing else "") for i, r in enumerate(everyone)],
        "run_id": [r.run_id for r in everyone],
    })
    ours, thesis = [], []
    not_competing = list(range(competing, len(everyone)))
    for key, (mean, std) in values.items():
        frame[f"{key}_mean"], frame[f"{key}_std"] = mean, std
        higher = key.endswith("_avg") or not derived.lower_is_better(get_task(key).primary_metric)
        ours.append(column_cells([fmt_mean_std(m, s) for m, s in zip(mean, std)], mean, higher, 1, not_competing))
        column = REPORTED_TASK.get(key, key)
        rep_mean, rep_std = printed(rep_rows, column), printed(rep_rows, f"{column}_std")
        frame[f"reported_{key}"], frame[f"reported_{key}_std"] = rep_mean, rep_std
        thesis.append(column_cells([fmt_mean_std(m, s) for m, s in zip(rep_mean, rep_std)], rep_mean, higher, 1,
                                   not_competing))
    rows = [grid_row(label_cell(run, notes, LARGE_SUFFIX if i >= competing else ""), [c[i] for c in ours],
                     None if rep_rows[i] is None else [c[i] for c in thesis], rule_before=i == competing)
            for i, run in enumerate(everyone)]
    columns = _headers(tasks) + [Column(f"{FAMILY_TITLES.get(family, family.upper())} Avg.", arrow="↑")]
    large_note = (f" Rows marked {LARGE_SUFFIX} are the larger models of Appendix 3.11 ({large_experiment}); "
                  "they do not compete for bold." if large else "")
    caption = (
        f"{what} ({table.replace('table_', 'Table ').replace('_', '.')}): primary metric of each task "
        f"(x 100), {seeds_phrase(config)}; the thesis's printed values (five seeds) are in the row below each "
        f"model. {scale_note(config, config['_matrix'][experiment]['backbone'])}.{large_note} "
        "Bold: best per task (↑: higher is better), among reproduced and among printed values."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes)
    context["profile"] = profile
    return Table(frame=frame, context=context)


def score_peop_cells(scores, peops, exclude: list[int]) -> list[Cell]:
    """"81.9 (5.41)" cells: best score underlined, best PEoP bold (the thesis's marking), "(-)" where none."""
    best_score = best_flags(scores, True, 1)
    best_peop = best_flags(peops, True, 2, exclude)
    cells = []
    for score, peop_, s_best, p_best in zip(scores, peops, best_score, best_peop):
        s = fmt_number(score, 1)
        p = "-" if is_missing(peop_) else fmt_number(peop_, 2)
        s = "\\underline{" + s + "}" if s_best else s
        p = "\\textbf{" + p + "}" if p_best else p
        cells.append(Cell(f"{s} ({p})", raw=True))
    return cells


def score_peop_table(profile: str, config: dict, tidy: pd.DataFrame, *, table: str, experiment: str,
                     family: str, what: str) -> Table:
    """Per-task score with its PEoP (against SHA, on that task) in parentheses."""
    selected = experiment_runs(config, experiment, table)
    primary, tasks = _primary(tidy, profile, config, table, selected, family)
    ids = [r.run_id for r in selected]
    extras = [i for i, r in enumerate(selected) if is_extra(r)]
    rep_rows = thesis_rows(load_reported(table), selected)
    notes = Notes()
    frame = pd.DataFrame({"attention": [run_label(r) for r in selected], "run_id": ids})
    ours, thesis = [], []
    for task in tasks:
        inverse = derived.is_inverse(primary, family, [task])
        summary = derived.with_efficiency(derived.family_summary(primary, family, [task]), inverse=inverse)
        summary = summary.set_index("run_id").loc[ids]
        mean = summary["mean"].to_numpy()
        peop_ = [math.nan if i in extras else v for i, v in enumerate(summary["peop"].to_numpy())]
        frame[f"{task}_mean"], frame[f"{task}_peop"] = mean, peop_
        ours.append(score_peop_cells(mean, peop_, extras))
        column = REPORTED_TASK.get(task, task)
        rep_score, rep_peop = printed(rep_rows, column), printed(rep_rows, f"{column}_peop")
        frame[f"reported_{task}"], frame[f"reported_{task}_peop"] = rep_score, rep_peop
        thesis.append(score_peop_cells(rep_score, rep_peop, extras))
    rows = [grid_row(label_cell(run, notes), [c[i] for c in ours], None if rep_rows[i] is None else [c[i] for c in thesis])
            for i, run in enumerate(selected)]
    caption = (
        f"{what} ({table.replace('table_', 'Table ').replace('_', '.')}): score of each task (x 100, "
        f"{seeds_phrase(config).replace(' (std)', '')}) and, in parentheses, its performance elasticity of "
        f"parameters (PEoP) against SHA on that task; the thesis's printed values are in the row below each model. "
        f"{scale_note(config, config['_matrix'][experiment]['backbone'])}. Underlined: best score; bold: best PEoP "
        "(per task, among reproduced and among printed values)."
    )
    context = grid_context(caption=caption, columns=_headers(tasks), rows=rows, notes=notes)
    context["profile"] = profile
    return Table(frame=frame, context=context)


def table_3_5(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-only models on GLUE dev sets, per task (Table 3.5)."""
    return mean_std_table(profile, config, tidy, table="table_3_5", experiment="ch3_encoder", family="glue",
                          what="Encoder-only models on GLUE dev sets")


def table_3_6(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-only models on SUPERGLUE dev sets, per task (Table 3.6)."""
    return mean_std_table(profile, config, tidy, table="table_3_6", experiment="ch3_encoder", family="superglue",
                          what="Encoder-only models on SUPERGLUE dev sets")


def table_3_7(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-only GLUE scores with PEoP per task (Table 3.7)."""
    return score_peop_table(profile, config, tidy, table="table_3_7", experiment="ch3_encoder", family="glue",
                            what="Encoder-only models on GLUE dev sets with PEoP")


def table_3_8(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-only SUPERGLUE scores with PEoP per task (Table 3.8)."""
    return score_peop_table(profile, config, tidy, table="table_3_8", experiment="ch3_encoder", family="superglue",
                            what="Encoder-only models on SUPERGLUE dev sets with PEoP")


def table_3_9(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Decoder-only models on GLUE dev sets, per task (Table 3.9)."""
    return mean_std_table(profile, config, tidy, table="table_3_9", experiment="ch3_decoder", family="glue",
                          what="Decoder-only models on GLUE dev sets")


def table_3_10(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Decoder-only GLUE scores with PEoP per task (Table 3.10; causal LM pretraining, DESIGN §8)."""
    return score_peop_table(profile, config, tidy, table="table_3_10", experiment="ch3_decoder", family="glue",
                            what="Decoder-only models (causal LM pretraining) on GLUE dev sets with PEoP")
