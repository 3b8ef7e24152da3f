"""Chapter 2's GLUE and memory tables (2.1, 2.2, 2.6) from runs, and its hyperparameter tables (2.4, 2.5).

Rows follow the thesis: the baselines, then the HashFormers under their group headings (MD, LSH),
each reproduced row above the thesis's printed row (params/reported/table_2_*.csv). A run the
profile cannot run (``absent_runs``, e.g. CANINE-C without the hub) keeps its row, with "-" and the
reason as a footnote. Table 2.2's counts are Appendix 2.8's, made from each run's own model at the
profile's scale (:func:`leanlm.reporting.ch2.results.run_counts`); the thesis-scale counts are the
analytic item ``table_2_2_parameters`` (:mod:`leanlm.reporting.ch2.analytic`). Timing tables (2.3
and the side-by-side table) live in :mod:`leanlm.reporting.ch2.speed`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from leanlm.data.tasks import get_task
from leanlm.errors import LeanLMError
from leanlm.reporting.ch2 import counts as ch2_counts
from leanlm.reporting.ch2.results import (
    BASELINE,
    MAIN,
    RELATED,
    SUBWORD,
    absent_runs,
    finetune_variant,
    glue_scores,
    glue_seeds,
    glue_settings,
    glue_tasks,
    model_of,
    require_named,
    run_counts,
    select_runs,
)
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
# The module, not its names: params_tables imports render, which imports this module (a cycle
# when params_tables is imported first); its names are looked up when the tables are built.
from leanlm.reporting import params_tables as pt
from leanlm.reporting.reported import load_reported, parse_count
from leanlm.reporting.render import Table, column_cells, fmt_mean_std, fmt_number, scale_note
from leanlm.runs import Run, pretrain_settings, runs

UP, DOWN = "↑", "↓"
CH2_EXPERIMENTS = (MAIN, SUBWORD, RELATED)


def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def absent_note(profile: str, reason: str) -> str:
    return f"Not run in the {profile} profile: {reason}"


def printed_values(reported: pd.DataFrame, key: str, columns: Sequence[str]) -> list:
    """The thesis's ``columns`` of row ``key`` (NaN where the row or a value is absent)."""
    if not key or key not in reported.index:
        return [math.nan] * len(columns)
    row = reported.loc[key]
    out = []
    for column in columns:
        value = row[column] if column in row.index else math.nan
        out.append(math.nan if isinstance(value, str) and value.strip() in ("", "-") else value)
    return out


def with_headings(entries: list[tuple[str, dict]], width: int) -> list[dict]:
    """Grid rows with the thesis's group headings ("HashFormers-MD (Ours)") before each new group."""
    rows, group = [], None
    for heading, row in entries:
        if heading != group and heading != "Baselines":
            rows.append(grid_row(Cell(f"{heading} (Ours)" if heading.startswith("HashFormers") else heading),
                                 [""] * width, rule_before=True))
        group = heading
        rows.append(row)
    return rows


def glue_columns(tasks: Sequence[str]) -> list[Column]:
    return ([Column("Token", align="l")] + [Column(get_task(t).thesis_name, arrow=UP) for t in tasks]
            + [Column("Avg.", arrow=UP)])


# ----------------------------------------------------------------------------- Tables 2.1 and 2.6
def glue_table(profile: str, config: dict, tidy: pd.DataFrame, *, table: str, runs: list[Run],
               reported_keys: list[str], caption: str) -> Table:
    """Token | GLUE task means | Avg. (std) for ``runs``, each above the thesis's row ``reported_keys[i]``."""
    absent = absent_runs(config)
    present = [r for r in runs if r.run_id not in absent]
    scores = glue_scores(tidy, profile, config, table, present)
    tasks = glue_tasks(config)
    reported = load_reported(table)
    notes = Notes()
    ids = [r.run_id for r in runs]
    means = scores.tasks.reindex(ids)
    avg = scores.avg.reindex(ids)

    frame = pd.DataFrame({
        "model": [model_of(r).full_label for r in runs], "group": [model_of(r).group for r in runs],
        "run_id": ids, "token": [model_of(r).token for r in runs],
        "absent": [absent.get(i, "") for i in ids], "n_seeds": avg["n_seeds"].to_numpy(),
    })
    ours, thesis = [[Cell(model_of(r).token) for r in runs]], []
    thesis_token = [Cell(str(v)) if not is_missing(v) else Cell("-")
                    for v in (printed_values(reported, k, ["token"])[0] for k in reported_keys)]
    thesis.append(thesis_token)
    for task in tasks:
        values = means[f"{task}_mean"].to_numpy()
        frame[f"{task}_mean"], frame[f"{task}_std"] = values, means[f"{task}_std"].to_numpy()
        ours.append(column_cells([fmt_number(v) for v in values], values, True, 1))
        printed = [printed_values(reported, k, [task])[0] for k in reported_keys]
        frame[f"reported_{task}"] = printed
        thesis.append(column_cells([fmt_number(v) for v in printed], printed, True, 1))
    mean, std = avg["mean"].to_numpy(), avg["std"].to_numpy()
    frame["glue_avg_mean"], frame["glue_avg_std"] = mean, std
    ours.append(column_cells([fmt_mean_std(m, s) for m, s in zip(mean, std)], mean, True, 1))
    printed = [printed_values(reported, k, ["glue_avg", "glue_avg_std"]) for k in reported_keys]
    frame["reported_glue_avg"] = [p[0] for p in printed]
    frame["reported_glue_avg_std"] = [p[1] for p in printed]
    thesis.append(column_cells([fmt_mean_std(*p) for p in printed], [p[0] for p in printed], True, 1))

    columns = glue_columns(tasks)
    entries = []
    for i, run in enumerate(runs):
        label = notes.marked(Cell(model_of(run).label), absent_note(profile, absent[run.run_id])
                             if run.run_id in absent else None)
        has_thesis = bool(reported_keys[i]) and reported_keys[i] in reported.index
        entries.append((model_of(run).group, grid_row(label, [c[i] for c in ours],
                                                      [c[i] for c in thesis] if has_thesis else None)))
    context = grid_context(caption=caption, columns=columns, rows=with_headings(entries, len(columns)),
                           notes=notes, label_header="Model", font="footnotesize")
    context["profile"] = profile
    return Table(frame=frame, context=context)


def seeds_text(config: dict) -> str:
    n = len(glue_seeds(config))
    return f"over {n} fine-tuning seeds" if n > 1 else "from one fine-tuning seed"


def table_2_1(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """GLUE dev results of the baselines and HashFormers (Table 2.1)."""
    runs = select_runs(config, MAIN, "table_2_1")
    caption = (
        f"Results on GLUE dev sets (Table 2.1): per-task means and the average with its standard deviation "
        f"{seeds_text(config)}, each row above the thesis's printed row (mean over three runs). "
        f"{scale_note(config, 'bert')}. MNLI: matched accuracy; QQP: F1; CoLA: Matthews correlation; STS: "
        f"Spearman correlation; accuracy otherwise. Bold: best per column."
    )
    return glue_table(profile, config, tidy, table="table_2_1", runs=runs,
                      reported_keys=[model_of(r).reported for r in runs], caption=caption)


def table_2_6(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """HashFormers with BPE (subword) vs word tokenisation on GLUE (Table 2.6, Appendix 2.11)."""
    subword = select_runs(config, SUBWORD, "table_2_6")
    word = {r.name: r for r in select_runs(config, MAIN, "table_2_6")}
    runs = []
    for run in subword:
        runs.append(run)
        if run.name in word:
            runs.append(word[run.name])
    keys = [f"{model_of(r).reported} / {model_of(r).token}" if model_of(r).reported else "" for r in runs]
    caption = (
        f"HashFormers on GLUE dev sets with subword (BPE pieces hashed) and word tokenisation (Table 2.6): "
        f"per-task means and the average with its standard deviation {seeds_text(config)}, each row above the "
        f"thesis's printed row. {scale_note(config, 'bert')}. Bold: best per column."
    )
    return glue_table(profile, config, tidy, table="table_2_6", runs=runs, reported_keys=keys, caption=caption)


# ----------------------------------------------------------------------------- Table 2.2
COUNT_COLUMNS = [("total", "#Total Params", DOWN), ("emb", "#Emb Params", DOWN), ("pcr_all", "PCR (All)", UP),
                 ("pcr_emb", "PCR (Emb)", UP), ("poep", "PoEP", DOWN)]
COUNT_DIGITS = {"pcr_all": 1, "pcr_emb": 1, "poep": 1}


def count_cell_texts(key: str, values: Sequence) -> list[str]:
    if key in ("total", "emb"):
        return ["-" if is_missing(v) else ch2_counts.format_count(float(v)) for v in values]
    return [fmt_number(v, COUNT_DIGITS[key]) for v in values]


def table_2_2(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Performance retention on GLUE vs BERT-MLM and the memory metrics PCR and PoEP (Table 2.2)."""
    table = "table_2_2"
    runs = select_runs(config, MAIN, table)
    baseline = require_named(runs, BASELINE, table, MAIN)
    absent = absent_runs(config)
    if baseline.run_id in absent:
        raise LeanLMError(f"{table}: its baseline {baseline.run_id} is listed in absent_runs "
                          f"({absent[baseline.run_id]}); PRR and PCR need it")
    present = [r for r in runs if r.run_id not in absent]
    scores = glue_scores(tidy, profile, config, table, present)
    tasks = glue_tasks(config)
    reported = load_reported(table)
    notes = Notes()
    ids = [r.run_id for r in runs]
    keys = [model_of(r).reported for r in runs]
    ref = runs.index(baseline)

    frame = pd.DataFrame({"model": [model_of(r).full_label for r in runs], "run_id": ids,
                          "absent": [absent.get(i, "") for i in ids]})
    columns, ours, thesis = [], [], []
    means = scores.tasks.reindex(ids)
    for task in tasks:
        values = 100.0 * means[f"{task}_mean"].to_numpy() / means.loc[baseline.run_id, f"{task}_mean"]
        frame[f"prr_{task}"] = values
        columns.append(Column(get_task(task).thesis_name, arrow=UP))
        ours.append(column_cells([fmt_number(v) for v in values], values, True, 1, exclude=[ref]))
        printed = [printed_values(reported, k, [task])[0] for k in keys]
        frame[f"reported_prr_{task}"] = printed
        thesis.append(column_cells([fmt_number(v) for v in printed], printed, True, 1))
    avg = scores.avg.reindex(ids)["mean"].to_numpy()
    frame["prr_glue_avg"] = 100.0 * avg / avg[ref]
    columns.append(Column("GLUE Avg.", arrow=UP))
    ours.append(column_cells([fmt_number(v) for v in frame["prr_glue_avg"]], frame["prr_glue_avg"].tolist(), True, 1,
                             exclude=[ref]))
    printed = [printed_values(reported, k, ["glue_avg"])[0] for k in keys]
    frame["reported_prr_glue_avg"] = printed
    thesis.append(column_cells([fmt_number(v) for v in printed], printed, True, 1))

    counts = [run_counts(profile, r) if r.run_id not in absent else (math.nan, math.nan, None) for r in runs]
    total = [c[0] for c in counts]
    emb = [c[1] for c in counts]
    metrics = {
        "total": total, "emb": emb,
        "pcr_all": [ch2_counts.pcr(t, total[ref]) for t in total],
        "pcr_emb": [ch2_counts.pcr(e, emb[ref]) for e in emb],
        "poep": [ch2_counts.poep(e, t) for e, t in zip(emb, total)],
    }
    printed_cols = {"total": "total_params", "emb": "emb_params", "pcr_all": "pcr_all", "pcr_emb": "pcr_emb",
                    "poep": "poep"}
    for key, header, arrow in COUNT_COLUMNS:
        values = metrics[key]
        frame[key] = values
        columns.append(Column(header, arrow=arrow))
        ours.append(column_cells(count_cell_texts(key, values), values, arrow == UP, 1, exclude=[ref]))
        printed = [printed_values(reported, k, [printed_cols[key]])[0] for k in keys]
        frame[f"reported_{key}"] = printed
        if key in ("total", "emb"):
            texts = ["-" if is_missing(p) else str(p) for p in printed]
            thesis.append(column_cells(texts, [parse_count(t) for t in texts], False, 1))
        else:
            thesis.append(column_cells([fmt_number(v) for v in printed], printed, arrow == UP, 1))

    entries = []
    for i, run in enumerate(runs):
        note = absent_note(profile, absent[run.run_id]) if run.run_id in absent else counts[i][2]
        if run is baseline:
            note = "The baseline of PRR and PCR (the thesis prints no row for it)."
        label = notes.marked(Cell(model_of(run).label), note)
        has_thesis = bool(keys[i]) and keys[i] in reported.index
        entries.append((model_of(run).group, grid_row(label, [c[i] for c in ours],
                                                      [c[i] for c in thesis] if has_thesis else None)))
    caption = (
        f"Memory efficiency metrics and performance retention (PRR, %) on GLUE using BERT-MLM as the baseline "
        f"(Table 2.2), each row above the thesis's printed row. PRR is the ratio of mean scores "
        f"({seeds_text(config)}); #Total counts every parameter of the model with a binary classification head "
        f"and #Emb the parameters that retrieve or generate token embeddings (Appendix 2.8), here of the "
        f"{profile} profile's own models, so the counts are not the thesis's: the analytic table "
        f"table_2_2_parameters gives them at BERT-base. {scale_note(config, 'bert')}. PCR and PoEP (%) from exact "
        f"counts. Bold: best per column, the baseline left out."
    )
    context = grid_context(caption=caption, columns=columns, rows=with_headings(entries, len(columns)), notes=notes,
                           label_header="Emb.", landscape=True, font="footnotesize")
    context["profile"] = profile
    return Table(frame=frame, context=context)


# ----------------------------------------------------------------------------- Tables 2.4 and 2.5
def params_scale(config: dict) -> str:
    """The scale sentence of a params table ("" for a profile without the BERT backbone)."""
    return f"{scale_note(config, 'bert')}." if "bert" in config["models"] else ""


def _size(config: dict) -> dict:
    """The model size the ch. 2 runs use (their dropout is the tables' dropout)."""
    experiment = config.get("_matrix", {}).get(MAIN, {})
    return config["models"].get(experiment.get("size", "bert"), config["models"].get("bert", {}))


PRETRAIN_ROWS = [
    ("Maximum train epochs", "Maximum train steps", "", "steps", lambda s, m: f"{s['steps']} steps"),
    ("Batch size (per GPU)", "Batch size", "", "batch_size",
     lambda s, m: f"{s['batch_size'] * s.get('grad_accum', 1)} instances"),
    ("Adam ϵ", "Adam eps", r"Adam $\epsilon$", "adam_eps", lambda s, m: pt.fmt_value(s["adam_eps"])),
    ("Adam β_1", "Adam beta1", r"Adam $\beta_1$", "adam_betas", lambda s, m: pt.fmt_value(s["adam_betas"][0])),
    ("Adam β_2", "Adam beta2", r"Adam $\beta_2$", "adam_betas", lambda s, m: pt.fmt_value(s["adam_betas"][1])),
    ("Sequence length", "Sequence length", "", "seq_len", lambda s, m: pt.fmt_value(s["seq_len"])),
    ("Peak learning rate", "Peak learning rate", "", "lr", lambda s, m: pt.fmt_value(s["lr"])),
    ("Learning rate schedule", "Learning rate schedule", "", "schedule", lambda s, m: pt.fmt_value(s["schedule"])),
    ("Warmup steps", "Warmup steps", "", "warmup_steps", lambda s, m: pt.fmt_value(s["warmup_steps"])),
    ("Weight decay", "Weight decay", "", "weight_decay", lambda s, m: pt.fmt_value(s["weight_decay"])),
    ("Attention Dropout", "Attention Dropout", "", "attention_dropout",
     lambda s, m: pt.fmt_value(m.get("attention_dropout"))),
    ("Dropout", "Dropout", "", "dropout", lambda s, m: pt.fmt_value(m.get("dropout"))),
    (None, "Shuffled token fraction", "", "shuffle_prob", lambda s, m: pt.fmt_value(s.get("shuffle_prob"))),
    (None, "Random token fraction", "", "random_prob", lambda s, m: pt.fmt_value(s.get("random_prob"))),
    (None, "Masking probability", "", "mask_prob", lambda s, m: pt.fmt_value(s.get("mask_prob"))),
    (None, "Gradient clipping (norm)", "", "clip_norm", lambda s, m: pt.fmt_value(s.get("clip_norm"))),
]
OBJECTIVE_HEADERS = {"shuffle_random": "S+R", "mlm": "MLM"}


def family_name(run: Run) -> str:
    """Who a hyperparameter column is for: HashFormers, BERT-Hash, or the model's own label."""
    model = model_of(run)
    if model.group.startswith("HashFormers"):
        return "HashFormers"
    return "BERT-Hash" if model.label.startswith("BERT-Hash") else model.label


def pretrain_columns(config: dict) -> list[tuple[str, str, dict, dict, str]]:
    """One column per (objective, pretrain variant) the ch. 2 runs pretrain with, S+R first: the
    profile's pretrain.<objective> with the variant laid over it (BERT-MLM's Table 2.4 settings)."""
    users: dict[tuple[str, str], list[Run]] = {}
    for run in runs(config):
        if run.experiment in CH2_EXPERIMENTS and run.objective in OBJECTIVE_HEADERS:
            users.setdefault((run.objective, getattr(run, "pretrain_variant", "")), []).append(run)
    columns = []
    for (objective, variant), group in sorted(users.items(), key=lambda kv: list(OBJECTIVE_HEADERS).index(kv[0][0])):
        key = f"{objective}_{variant}" if variant else objective
        source = f"pretrain.{objective}" + (f" + pretrain_variants.{variant}" if variant else "")
        who = list(dict.fromkeys(family_name(r) for r in group))
        header = f"{OBJECTIVE_HEADERS[objective]} ({', '.join(who)})"
        columns.append((key, header, pretrain_settings(config, group[0]), _size(config), source))
    return columns


def table_2_4(profile: str, config: dict) -> Table:
    """Pretraining hyperparameters of the ch. 2 objectives as the profile sets them (Table 2.4)."""
    columns = pretrain_columns(config)
    if not columns:  # a profile without ch. 2 models: its S+R / MLM blocks as they stand, if any
        columns = [(o, h, config["pretrain"][o], _size(config), f"pretrain.{o}")
                   for o, h in OBJECTIVE_HEADERS.items() if o in config["pretrain"]]
    caption = (f"Hyperparameters used in pretraining (Table 2.4), as the {profile} profile sets them (params file "
               f"{Path(config['_params_file']).name}), beside the thesis's. The thesis trains 10 epochs with 16 "
               f"instances per GPU on eight GPUs (a batch of 128, §2.4.2); the profile sets optimizer steps and the "
               f"batch of one step. {params_scale(config)} A '-' marks a setting the thesis does not print.")
    return pt.hyperparameter_table(profile, config, table="table_2_4", rows=PRETRAIN_ROWS, columns=columns,
                                caption=caption, thesis_align="l", value_align="p{2.6cm}")


def _early_stopping_note(settings: dict) -> str:
    """Chapter 2 prints no early stopping (Table 2.5 gives only the maximum epochs): say what the profile does."""
    patience = settings.get("early_stopping_patience")
    if patience is None:
        return ("The thesis prints no early stopping for chapter 2, and the runs train every epoch; the best "
                "evaluation on the dev set is the one reported.")
    return (f"The thesis prints no early stopping for chapter 2; this profile stops after {patience} evaluations "
            f"without improvement (early_stopping_patience), a deviation.")


def table_2_5(profile: str, config: dict) -> Table:
    """Fine-tuning hyperparameters of the ch. 2 GLUE runs as the profile sets them (Table 2.5)."""
    variant = finetune_variant(config)
    source = "finetune.glue" + (f" + finetune_variants.{variant}" if variant else "")
    columns = [("glue", "GLUE (all ch. 2 models)", glue_settings(config), _size(config), source)
               ] if "glue" in config["finetune"] else []
    rows = pt.FINETUNE_ROWS + [(None, "Fine-tuning seeds", "", "seeds",
                             lambda s, m: pt.fmt_value(s.get("seeds", config["seeds"])))]
    caption = (f"Hyperparameters used in fine-tuning (Table 2.5), as the {profile} profile sets them (params file "
               f"{Path(config['_params_file']).name}, {source}), beside the thesis's (three runs). "
               f"{_early_stopping_note(glue_settings(config) if columns else {})} "
               f"{params_scale(config)} A '-' marks a setting the thesis does not print.")
    return pt.hyperparameter_table(profile, config, table="table_2_5", rows=rows, columns=columns,
                                caption=caption, thesis_align="p{6.2cm}", value_align="p{3.2cm}")
