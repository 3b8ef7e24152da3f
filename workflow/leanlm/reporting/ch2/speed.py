"""Chapter 2's timing tables: Table 2.3 (pretraining and inference time per sample, speed-up vs
BERT-MLM) and ``table_2_side_by_side``, a table the thesis lacks: every hash-embedding family on the
same backbone (HashFormers, NeuML BERT-Hash, EELBERT-style dynamic embeddings, CANINE-C), with its
embedding parameters, speed and GLUE score.

Times are what the pipeline measured on the machine that ran it; the caption names that hardware from
the records, since a time means nothing without it. Both tables' PT columns come from the pretraining
speed record (rule ``pretraining_speed``, :mod:`leanlm.reporting.pretraining_speed`: every model at one
batch, per sample, interleaved rounds, the median over rounds), the same measurement the speed claims
read, never the training clock (pretrain.json's ``timing.seconds_per_sample``: other batches, shared
machines); a run the record does not time has an empty PT cell whose note says why. Inference is
glue.json's ``timing.inference_seconds_per_sample``, one number or one per task. Speed-up (Eq. 2.8) is Time_BERT-MLM / Time_model; with per-task inference times
it is taken per task and shown as the range over tasks, as the thesis prints "1.0x~2.4x".
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from leanlm.errors import LeanLMError
from leanlm.reporting.ch2 import counts as ch2_counts
from leanlm.reporting.ch2.results import (
    BASELINE,
    MAIN,
    RELATED,
    absent_runs,
    backbone_shape,
    glue_scores,
    hardware_of,
    inference_ms_per_sample,
    model_dict,
    model_of,
    is_pretrained,
    require_named,
    run_counts,
    select_runs,
)
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.pretraining_speed import EXPERIMENT as TIMED_EXPERIMENT
from leanlm.reporting.pretraining_speed import median_ms, protocol_text, read_speed
from leanlm.reporting.render import Table, column_cells, fmt_mean_std, fmt_number, scale_note
from leanlm.reporting.ch2.tables import absent_note, is_missing, printed_values, seeds_text, with_headings
from leanlm.reporting.reported import load_reported
from leanlm.runs import Run

UP, DOWN = "↑", "↓"
NAN = math.nan


def fmt_range(lo, hi, digits: int = 1, suffix: str = "") -> str:
    """"2.0–4.6" (the thesis's "2.0~4.6"), one value where both ends print the same, "-" if missing."""
    if is_missing(lo):
        return "-"
    a, b = f"{float(lo):.{digits}f}{suffix}", f"{float(hi):.{digits}f}{suffix}"
    return a if a == b else f"{a}–{b}"


def inference_summary(base: dict[str, float], model: dict[str, float]) -> dict[str, float]:
    """Inference time (min, max, mean over tasks) and speed-up vs ``base`` (min, max, mean).

    Per-task speed-ups where both sides timed the same tasks; otherwise the ratio of mean times.
    """
    times = np.array(list(model.values()), dtype=float)
    common = sorted((set(base) & set(model)) - {""})
    if common:
        ups = np.array([base[t] / model[t] for t in common])
    else:
        ups = np.array([np.mean(list(base.values())) / times.mean()])
    return {"infer_ms_min": times.min(), "infer_ms_max": times.max(), "infer_ms_mean": times.mean(),
            "infer_speedup_min": ups.min(), "infer_speedup_max": ups.max(), "infer_speedup_mean": ups.mean()}


def speed_rows(profile: str, runs: Sequence[Run], baseline: Run, absent: dict, speed: dict) -> pd.DataFrame:
    """Per run: pt_ms, pt_speedup, the inference summary, and the hardware of both records. PT from the
    pretraining speed record ``speed`` (NaN for runs it did not time: :func:`untimed_reason`)."""
    base_pt = median_ms(speed, baseline.run_id)
    base_infer = inference_ms_per_sample(profile, baseline)
    rows = []
    for run in runs:
        if run.run_id in absent:
            rows.append({"run_id": run.run_id})
            continue
        pt = median_ms(speed, run.run_id)
        rows.append({"run_id": run.run_id, "pt_ms": pt, "pt_speedup": base_pt / pt if pt == pt else NAN,
                     **inference_summary(base_infer, inference_ms_per_sample(profile, run)),
                     "hardware_pretrain": speed.get("device") if pt == pt else None,
                     "hardware_inference": hardware_of(profile, run, "glue")})
    columns = ["run_id", "pt_ms", "pt_speedup", "infer_ms_min", "infer_ms_max", "infer_ms_mean",
               "infer_speedup_min", "infer_speedup_max", "infer_speedup_mean", "hardware_pretrain",
               "hardware_inference"]
    return pd.DataFrame(rows, columns=columns)


def untimed_reason(run: Run) -> str:
    """Why the speed record has no time for ``run`` (a present run): not pretrained, or not one it times."""
    if not is_pretrained(run):
        return "Not pretrained by the pipeline, so no pretraining time."
    return (f"Not timed by the pretraining speed record, which times {TIMED_EXPERIMENT}'s pretrained runs "
            f"(rule pretraining_speed); the training clock is not used in its place, since it compares batch "
            f"sizes and machine loads as well as models.")


def hardware_sentence(speed: pd.DataFrame) -> str:
    """"Pretraining timed on X; inference on Y." from the records (several machines said so)."""
    parts = []
    for column, what in (("hardware_pretrain", "pretraining"), ("hardware_inference", "inference")):
        machines = sorted({h for h in speed[column] if isinstance(h, str) and h})
        if not machines:
            continue
        text = f"{what} timed on {machines[0]}" if len(machines) == 1 else \
            f"{what} timed on {len(machines)} different machines ({'; '.join(machines)}): compare rows with care"
        parts.append(text)
    text = "; ".join(parts)
    return (text[0].upper() + text[1:] + ".") if parts else "No record names its hardware."


# ----------------------------------------------------------------------------- Table 2.3
def table_2_3(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Pretraining and inference time per sample and speed-up vs BERT-MLM (Table 2.3)."""
    table = "table_2_3"
    runs = [r for r in select_runs(config, MAIN, table) if model_of(r).speed or model_of(r).group == "Other"]
    baseline = require_named(runs, BASELINE, table, MAIN)
    absent = absent_runs(config)
    if baseline.run_id in absent:
        raise LeanLMError(f"{table}: its baseline {baseline.run_id} is listed in absent_runs; speed-ups need it")
    record = read_speed(config)  # the same measurement as the speed claims (not the training clock)
    speed = speed_rows(profile, runs, baseline, absent, speed=record)
    reported = load_reported(table)
    keys = [model_of(r).speed for r in runs]
    ref = runs.index(baseline)
    notes = Notes()

    frame = pd.DataFrame({"model": [model_of(r).full_label for r in runs],
                          "absent": [absent.get(r.run_id, "") for r in runs]})
    frame = pd.concat([frame, speed], axis=1)
    printed = {c: [printed_values(reported, k, [c])[0] for k in keys] for c in
               ("pt_time", "pt_speedup", "infer_time_min", "infer_time_max", "infer_speedup_min", "infer_speedup_max")}
    for column, values in printed.items():
        frame[f"reported_{column}"] = values
    ours = [
        column_cells([fmt_number(v) for v in speed["pt_ms"]], speed["pt_ms"].tolist(), False, 1),
        column_cells([fmt_range(v, v, suffix="x") for v in speed["pt_speedup"]], speed["pt_speedup"].tolist(), True, 1,
                     exclude=[ref]),
        column_cells([fmt_range(lo, hi) for lo, hi in zip(speed["infer_ms_min"], speed["infer_ms_max"])],
                     speed["infer_ms_mean"].tolist(), False, 1),
        column_cells([fmt_range(lo, hi, suffix="x") for lo, hi in zip(speed["infer_speedup_min"],
                                                                      speed["infer_speedup_max"])],
                     speed["infer_speedup_mean"].tolist(), True, 1, exclude=[ref]),
    ]
    thesis = [
        [Cell(fmt_number(v)) for v in printed["pt_time"]],
        [Cell(fmt_range(v, v, suffix="x")) for v in printed["pt_speedup"]],
        [Cell(fmt_range(lo, hi)) for lo, hi in zip(printed["infer_time_min"], printed["infer_time_max"])],
        [Cell(fmt_range(lo, hi, suffix="x")) for lo, hi in zip(printed["infer_speedup_min"],
                                                               printed["infer_speedup_max"])],
    ]
    columns = [Column("PT Time (ms/samp)", arrow=DOWN), Column("PT Speed-up Rate", arrow=UP),
               Column("Infer Time (ms/samp)", arrow=DOWN), Column("Infer Speed-up Rate", arrow=UP)]
    entries = []
    for i, run in enumerate(runs):
        note = None
        if run.run_id in absent:
            note = absent_note(profile, absent[run.run_id])
        elif run.name == "canine_c":
            note = "CANINE-C is the hub checkpoint, not pretrained here (the thesis prints '-' too)."
        label = notes.marked(Cell(model_of(run).full_label), note)
        has_thesis = bool(keys[i]) and keys[i] in reported.index
        entries.append((model_of(run).group, grid_row(label, [c[i] for c in ours],
                                                      [c[i] for c in thesis] if has_thesis else None)))
    per_task = speed["infer_ms_min"].ne(speed["infer_ms_max"]).any()
    caption = (
        f"Pretraining (PT) and inference time per sample and speed-up rate against BERT-MLM (Table 2.3), measured "
        f"by the pipeline, each row above the thesis's printed row (all HashFormers-Emb rows beside its one "
        f"HASHFORMERS-Emb row, and so on). {hardware_sentence(speed)} The thesis used eight NVIDIA Tesla V100 "
        f"GPUs for pretraining and one for inference. {protocol_text(record)} (the thesis: 512 tokens); "
        f"inference pads to the longest sequence of the batch"
        + ("; ranges are over the GLUE tasks" if per_task else "") + f". {scale_note(config, 'bert')}. "
        "Bold: best per column (speed-up leaves out the baseline)."
    )
    context = grid_context(caption=caption, columns=columns, rows=[row for _, row in entries], notes=notes,
                           label_header="Model", font="footnotesize")
    context["profile"] = profile
    return Table(frame=frame, context=context)


# ----------------------------------------------------------------------------- side by side
CARD_NOTE = ("{label}: NeuML's model card reports {params} parameters at its own size (2 layers), MNLI-m {mnli}, "
             "MRPC F1 {mrpc_f1}, SST-2 {sst2} (x100); here its embedding sits on the profile's backbone.")


def side_by_side_runs(config: dict, table: str) -> list[Run]:
    main = select_runs(config, MAIN, table)
    related = select_runs(config, RELATED, table)
    hash_runs = [r for r in main if r.name.startswith(("md5_", "lsh_"))]
    base = [r for r in main if r.name in (BASELINE, "canine_c")]
    return base + hash_runs + related


def card_notes(reported: pd.DataFrame | None, run: Run) -> str | None:
    if reported is None or not run.name.startswith("bert_hash_"):
        return None
    key = f"bert-hash-{run.name.removeprefix('bert_hash_')}"
    if key not in reported.index:
        return None
    row = reported.loc[key]
    return CARD_NOTE.format(label=model_of(run).label, params=row["params"],
                            **{k: f"{100 * float(row[k]):.2f}" for k in ("mnli", "mrpc_f1", "sst2")})


def table_2_side_by_side(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Every hash-embedding family on one backbone: embedding parameters, speed and GLUE (no thesis table)."""
    table = "table_2_side_by_side"
    runs = side_by_side_runs(config, table)
    baseline = require_named(runs, BASELINE, table, MAIN)
    absent = absent_runs(config)
    if baseline.run_id in absent:
        raise LeanLMError(f"{table}: its baseline {baseline.run_id} is listed in absent_runs")
    present = [r for r in runs if r.run_id not in absent]
    scores = glue_scores(tidy, profile, config, table, present).avg.reindex([r.run_id for r in runs])
    record = read_speed(config)  # Table 2.3's measurement (not the training clock)
    speed = speed_rows(profile, runs, baseline, absent, speed=record)
    counts = [run_counts(profile, r) if r.run_id not in absent else (NAN, NAN, None) for r in runs]
    ref = runs.index(baseline)
    mean, std = scores["mean"].to_numpy(), scores["std"].to_numpy()
    prr = 100.0 * mean / mean[ref]
    emb, total = [c[1] for c in counts], [c[0] for c in counts]

    base_shape = backbone_shape(model_dict(profile, baseline))
    frame = pd.DataFrame({
        "model": [model_of(r).full_label for r in runs], "run_id": [r.run_id for r in runs],
        "absent": [absent.get(r.run_id, "") for r in runs],
        "backbone": ["" if r.run_id in absent else "x".join(map(str, backbone_shape(model_dict(profile, r))))
                     for r in runs],
        "emb": emb, "total": total, "pt_ms": speed["pt_ms"], "infer_ms": speed["infer_ms_mean"],
        "infer_speedup": speed["infer_speedup_mean"], "glue_avg_mean": mean, "glue_avg_std": std, "prr_glue_avg": prr,
        "hardware_pretrain": speed["hardware_pretrain"], "hardware_inference": speed["hardware_inference"],
    })
    # The thesis's numbers for the rows it has (Tables 2.1-2.3); BERT-Hash and EELBERT are not in it.
    t21, t22, t23 = (load_reported(t) for t in ("table_2_1", "table_2_2", "table_2_3"))
    keys = [model_of(r).reported for r in runs]
    speed_keys = [model_of(r).speed for r in runs]
    printed = {
        "emb": [printed_values(t22, k, ["emb_params"])[0] for k in keys],
        "total": [printed_values(t22, k, ["total_params"])[0] for k in keys],
        "pt": [printed_values(t23, k, ["pt_time"])[0] for k in speed_keys],
        "infer": [printed_values(t23, k, ["infer_time_min", "infer_time_max"]) for k in speed_keys],
        "speedup": [printed_values(t23, k, ["infer_speedup_min", "infer_speedup_max"]) for k in speed_keys],
        "glue": [printed_values(t21, k, ["glue_avg", "glue_avg_std"]) for k in keys],
        "prr": [printed_values(t22, k, ["glue_avg"])[0] for k in keys],
    }
    for key in ("emb", "total", "pt", "prr"):
        frame[f"reported_{key}"] = printed[key]
    frame["reported_infer_ms"] = [fmt_range(*v) for v in printed["infer"]]
    frame["reported_infer_speedup"] = [fmt_range(*v) for v in printed["speedup"]]
    frame["reported_glue_avg"] = [v[0] for v in printed["glue"]]
    frame["reported_glue_avg_std"] = [v[1] for v in printed["glue"]]

    def count_texts(values):
        return ["-" if is_missing(v) else "0" if v == 0 else ch2_counts.format_count(float(v)) for v in values]

    ours = [
        column_cells(count_texts(emb), emb, False, 1, exclude=[ref]),
        column_cells(count_texts(total), total, False, 1, exclude=[ref]),
        column_cells([fmt_number(v) for v in speed["pt_ms"]], speed["pt_ms"].tolist(), False, 1),
        column_cells([fmt_number(v) for v in speed["infer_ms_mean"]], speed["infer_ms_mean"].tolist(), False, 1),
        column_cells([fmt_range(v, v, suffix="x") for v in speed["infer_speedup_mean"]],
                     speed["infer_speedup_mean"].tolist(), True, 1, exclude=[ref]),
        column_cells([fmt_mean_std(m, s) for m, s in zip(mean, std)], mean, True, 1),
        column_cells([fmt_number(v) for v in prr], prr, True, 1, exclude=[ref]),
    ]
    thesis = [
        [Cell("-" if is_missing(v) else str(v)) for v in printed["emb"]],
        [Cell("-" if is_missing(v) else str(v)) for v in printed["total"]],
        [Cell(fmt_number(v)) for v in printed["pt"]],
        [Cell(fmt_range(*v)) for v in printed["infer"]],
        [Cell(fmt_range(*v, suffix="x")) for v in printed["speedup"]],
        [Cell(fmt_mean_std(*v)) for v in printed["glue"]],
        [Cell(fmt_number(v)) for v in printed["prr"]],
    ]
    try:
        card = load_reported(table)
    except LeanLMError:
        card = None
    notes = Notes()
    labels = []
    for run in runs:
        note = None
        if run.run_id in absent:
            note = absent_note(profile, absent[run.run_id])
        elif run.name == "canine_c":
            note = ("CANINE-C is Google's pretrained checkpoint at its own size (12 layers, d=768, character "
                    "input), not the profile's backbone; #Emb by Eq. 2.10.")
        elif backbone_shape(model_dict(profile, run)) != base_shape:
            shape = "x".join(map(str, backbone_shape(model_dict(profile, run))))
            note = (f"Backbone differs from BERT-MLM's (layers x d x heads x FFN {shape} vs "
                    f"{'x'.join(map(str, base_shape))}).")
        else:
            note = card_notes(card, run)
            if run.name == "eelbert":
                note = "EELBERT-style dynamic embedding: no learned embedding parameters; its source prints no scores."
        labels.append(notes.marked(Cell(model_of(run).label), note))
    pt_cells = ours[2]  # marked after the labels, so that the labels' marks come first
    for i, run in enumerate(runs):
        if run.run_id not in absent and is_missing(speed["pt_ms"][i]):
            pt_cells[i] = notes.marked(pt_cells[i], untimed_reason(run))
    entries = []
    for i, (run, label) in enumerate(zip(runs, labels)):
        has_thesis = any(not is_missing(printed[k][i]) for k in ("emb", "pt", "prr")) or \
            not is_missing(printed["glue"][i][0])
        entries.append((model_of(run).group, grid_row(label, [c[i] for c in ours],
                                                      [c[i] for c in thesis] if has_thesis else None)))
    columns = [Column("#Emb", arrow=DOWN), Column("#Total", arrow=DOWN), Column("PT ms/samp", arrow=DOWN),
               Column("Infer ms/samp", arrow=DOWN), Column("Infer speed-up", arrow=UP),
               Column("GLUE Avg.", arrow=UP), Column("PRR", arrow=UP)]
    caption = (
        "Hash embeddings side by side on one backbone (a table the thesis lacks): HashFormers, NeuML BERT-Hash, "
        "EELBERT-style dynamic embeddings and CANINE-C, each with Appendix 2.8's embedding and total parameters "
        "(binary classification head), time per sample, inference speed-up against BERT-MLM (mean over tasks), "
        f"GLUE average ({seeds_text(config)}) and its retention (PRR, %) against BERT-MLM. Thesis rows from "
        f"Tables 2.1-2.3 where it has the model. {hardware_sentence(speed)} Pretraining time as Table 2.3 "
        f"measures it (the pretraining speed record, not the training clock). {protocol_text(record)}; inference "
        f"is the mean over the GLUE tasks. {scale_note(config, 'bert')}. "
        "Bold: best per column, the baseline left out of the ratios and counts."
    )
    context = grid_context(caption=caption, columns=columns, rows=with_headings(entries, len(columns)), notes=notes,
                           label_header="Model", landscape=True, font="footnotesize")
    context["profile"] = profile
    return Table(frame=frame, context=context)
