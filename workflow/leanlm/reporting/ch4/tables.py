"""Chapter 4's results tables: 4.1 (uniform / hybrid / hybrid skip at the main size), 4.2 (the
Qwen3-1.7B-style models), 4.3 (grouped-query attention) and 4.4 (WikiText perplexity by context length).

Tables 4.1-4.3 share one layout, the thesis's: Rnd. Guess and Majority (computed from the task
data, never typed), Standard, then one section per configuration (UNIFORM, HYBRID, HYBRID SKIP; the
appendix tables print UNI. / HYB.), seven zero-shot accuracies with their standard errors as
subscripts, their average, WikiText perplexity and LAMBADA perplexity and accuracy. Each row is
followed by the thesis's printed row (params/reported/table_4_*.csv, same column names).
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from leanlm.reporting.ch4.records import (
    LM_TASKS,
    NLU_TASKS,
    SCORE_COLUMNS,
    TASK_HEADERS,
    Ch4Row,
    baseline_scores,
    experiment_rows,
    lm_eval_scores,
    profile_tasks,
    read_analysis,
    scale_note,
)
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.render import Table, best_flags, is_missing
from leanlm.reporting.reported import load_reported, reported_path

UP, DOWN = "↑", "↓"
MAIN_HEADS = {"uniform": "UNIFORM", "hybrid": "HYBRID", "skip": "HYBRID SKIP"}
APPENDIX_HEADS = {"uniform": "UNI.", "hybrid": "HYB."}
BASELINES = ["Rnd. Guess", "Majority"]


def fmt_ppl(value) -> str:
    """A perplexity as the thesis prints it: 38.1, or 3E+5 from 10^5 on."""
    if is_missing(value):
        return "-"
    value = float(value)
    if math.isinf(value):
        return "inf"
    if value >= 1e5:  # one significant digit, halves rounded up (2.5E+5 -> 3E+5)
        exponent = math.floor(math.log10(value))
        mantissa = math.floor(value / 10**exponent + 0.5)
        if mantissa == 10:
            mantissa, exponent = 1, exponent + 1
        return f"{mantissa}E+{exponent}"
    return f"{value:.1f}"


def fmt_acc(value, std=None) -> str:
    """'41.5$_{1.0}$' (LaTeX: the standard error as a subscript), '41.5' without one, '-' for none."""
    if is_missing(value):
        return "-"
    return f"{value:.1f}" if is_missing(std) else f"{value:.1f}$_{{{std:.1f}}}$"


# (value column, its standard-error column, header, group, higher is better)
SCORE_LAYOUT = ([(t, f"{t}_std", "acc", TASK_HEADERS[t], True) for t in NLU_TASKS]
                + [("avg_acc", None, "acc", "Avg.", True), ("wikitext_ppl", None, "ppl", "Wiki", False),
                   ("lambada_openai_ppl", None, "ppl", "LAMBADA", False),
                   ("lambada_openai_acc", "lambada_openai_acc_std", "acc", "LAMBADA", True)])


def _cells(record: dict) -> list[str]:
    return [fmt_ppl(record.get(col)) if not higher else fmt_acc(record.get(col), record.get(std) if std else None)
            for col, std, _, _, higher in SCORE_LAYOUT]


def printed_rows(table: str) -> pd.DataFrame:
    """The reported CSV as text, so the thesis's rows show its numbers exactly as printed ('9E+4')."""
    return pd.read_csv(reported_path(table), comment="#", dtype=str, keep_default_na=False).set_index("row")


def _printed_cells(printed: pd.Series) -> list[str]:
    out = []
    for col, std, _, _, higher in SCORE_LAYOUT:
        value, error = printed.get(col, ""), printed.get(std, "") if std else ""
        out.append(value or "-" if not higher or not error else f"{value}$_{{{error}}}$")
    return out


def _columns() -> list[Column]:
    return [Column(header, group, UP if higher else DOWN) for _, _, header, group, higher in SCORE_LAYOUT]


def _task_note(config: dict) -> str:
    """Which profile task stands for which thesis column, and which columns the profile lacks."""
    tasks = profile_tasks(config)
    renamed = [f"{TASK_HEADERS[t]} = {name}" for t, name in tasks.items() if name != t]
    absent = [TASK_HEADERS[t] for t in NLU_TASKS + LM_TASKS if t not in tasks]
    note = f"Stand-in tasks: {', '.join(renamed)}. " if renamed else ""
    if absent:
        note += f"Not evaluated by this profile ('-'): {', '.join(absent)}; Avg. is over the evaluated tasks. "
    return note


def lm_eval_table(profile: str, config: dict, tidy: pd.DataFrame, *, table: str, experiments: Sequence[str],
                  optional: Sequence[str] = (), heads: dict[str, str], what: str) -> Table:
    """Baselines, Standard and each configuration's variants on lm-eval, above the thesis's rows."""
    rows = experiment_rows(config, experiments, table, heads, optional)
    scores = lm_eval_scores(tidy, profile, config, rows, table)
    # the baselines its own runs recorded (a table waits for its experiments only)
    baselines = baseline_scores(profile, config, [e for e in [*experiments, *optional] if e in config["experiments"]])
    reported, printed_text = load_reported(table), printed_rows(table)
    notes = Notes()
    labels = BASELINES + [r.label for r in rows]
    records = [baselines[b] for b in BASELINES] + [scores.loc[r.run_id].to_dict() for r in rows]
    texts = [_cells(rec) for rec in records]
    # Bold: the best model per column as printed (baselines do not compete).
    bold = [best_flags([rec.get(col) for rec in records], higher, 1, exclude=range(len(BASELINES)))
            for col, _, _, _, higher in SCORE_LAYOUT]
    evaluated = profile_tasks(config)
    missing_note = (f"Not computed for this profile's tasks: results/{profile}/baselines/<experiment>/lm_eval.json is absent "
                    "and no local task file was found (hub tasks) or no tokenizer (perplexities).")
    grid, frame_rows = [], []
    for i, (label, record) in enumerate(zip(labels, records)):
        row = None if i < len(BASELINES) else rows[i - len(BASELINES)]
        printed = reported.loc[label] if label in reported.index else None
        cells = [Cell(t, bold=bold[j][i], raw=True) for j, t in enumerate(texts[i])]
        thesis = None if printed is None else [Cell(t, raw=True) for t in _printed_cells(printed_text.loc[label])]
        # Majority has no perplexity row (the thesis prints '-'); any other gap is worth a note.
        lacking = row is None and any(is_missing(record.get(t if t in NLU_TASKS else f"{t}_ppl"))
                                      for t in evaluated if t in NLU_TASKS or label == "Rnd. Guess")
        first_of_section = i == len(BASELINES) or (row is not None and i > len(BASELINES)
                                                    and rows[i - len(BASELINES) - 1].config != row.config)
        grid.append(grid_row(notes.marked(Cell(label), missing_note if lacking else None), cells, thesis,
                             rule_before=first_of_section))
        frame_rows.append({
            "row": label, "config": "" if row is None else row.config, "variant": "" if row is None else row.variant,
            "run_id": "" if row is None else row.run_id, **{c: record.get(c, math.nan) for c in SCORE_COLUMNS},
            **{f"reported_{c}": (math.nan if printed is None else printed.get(c, math.nan)) for c in SCORE_COLUMNS},
        })
    caption = (
        f"{what} ({table.replace('table_', 'Table ').replace('_', '.')}): lm-eval zero-shot accuracy (%, standard "
        f"error as subscript) on the NLU tasks and their average, perplexity on WikiText (word level) and LAMBADA "
        f"OpenAI, and LAMBADA accuracy; each reproduced row above the thesis's printed row. "
        f"{scale_note(config, rows)}. {_task_note(config)}Rnd. Guess and Majority are computed from the tasks' "
        f"data. Bold: best model per column (↑/↓: higher/lower is better)."
    )
    context = grid_context(caption=caption, columns=_columns(), rows=grid, notes=notes, label_header="",
                           landscape=True, font="footnotesize", tabcolsep="2.5pt")
    context["profile"] = profile
    return Table(frame=pd.DataFrame(frame_rows), context=context)


def table_4_1(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Uniform, hybrid, hybrid-skip and standard models at the main size (Table 4.1)."""
    return lm_eval_table(profile, config, tidy, table="table_4_1", experiments=["ch4_uniform"],
                         optional=["ch4_hybrid", "ch4_skip"], heads=MAIN_HEADS,
                         what="Performance of uniform, hybrid, skip and standard models")


def table_4_2(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """The Qwen3-1.7B-architecture models, uniform / hybrid and standard (Table 4.2)."""
    return lm_eval_table(profile, config, tidy, table="table_4_2", experiments=["ch4_1_7b"], heads=APPENDIX_HEADS,
                         what="Performance of uniform, hybrid and standard models at the 1.7B (Qwen3) architecture")


def table_4_3(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Grouped-query attention models, uniform / hybrid and standard (Table 4.3)."""
    return lm_eval_table(profile, config, tidy, table="table_4_3", experiments=["ch4_gqa"], heads=APPENDIX_HEADS,
                         what="Performance of uniform, hybrid and standard models with grouped-query attention")


# ----------------------------------------------------------------------------- Table 4.4
def context_lengths(config: dict, measured: Sequence[dict], reported: pd.DataFrame) -> list[int]:
    """The profile's context lengths (or those measured), then the thesis's that the profile lacks."""
    ours = [int(n) for n in config.get("finetune", {}).get("analysis", {}).get("context_lengths", [])]
    ours = ours or sorted({n for m in measured for n in m})
    thesis = [int(c.removeprefix("len_")) for c in reported.columns if c.startswith("len_")]
    return sorted(set(ours) | set(thesis))


def table_4_4(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """WikiText perplexity of the standard, uniform and hybrid models by context length (Table 4.4)."""
    table = "table_4_4"
    rows: list[Ch4Row] = experiment_rows(config, ["ch4_uniform"], table, MAIN_HEADS, optional=["ch4_hybrid"])
    measured = [read_analysis(profile, r.run_id).context_ppl for r in rows]
    reported = load_reported(table)
    lengths = context_lengths(config, measured, reported)
    notes = Notes()
    bold = [best_flags([m.get(n) for m in measured], False, 1) for n in lengths]
    grid, frame_rows = [], []
    for i, (row, ppl) in enumerate(zip(rows, measured)):
        printed = reported.loc[row.label] if row.label in reported.index else None
        thesis = None if printed is None else [Cell(fmt_ppl(printed.get(f"len_{n}", math.nan))) for n in lengths]
        cells = [Cell(fmt_ppl(ppl.get(n)), bold=bold[j][i]) for j, n in enumerate(lengths)]
        first = i == 0 or rows[i - 1].config != row.config
        grid.append(grid_row(row.label, cells, thesis, rule_before=first and i > 0))
        frame_rows.append({"row": row.label, "config": row.config, "variant": row.variant, "run_id": row.run_id,
                           **{f"len_{n}": ppl.get(n, math.nan) for n in lengths},
                           **{f"reported_len_{n}": (math.nan if printed is None else printed.get(f"len_{n}", math.nan))
                              for n in lengths}})
    caption = (
        "Perplexities of uniform, hybrid and standard models on WikiText across context lengths (Table 4.4): "
        "each model scores the text in disjoint rolling windows of at most L tokens; reproduced rows above the "
        f"thesis's. {scale_note(config, rows)}. '-' where a length was not evaluated (beyond the profile's "
        "context or not in its list). Bold: lowest per length."
    )
    context = grid_context(caption=caption, columns=[Column(str(n), "length") for n in lengths], rows=grid,
                           notes=notes, label_header="PPL↓", font="small")
    context["profile"] = profile
    return Table(frame=pd.DataFrame(frame_rows), context=context)
