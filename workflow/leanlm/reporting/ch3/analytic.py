"""Chapter 3's counting outputs beyond Tables 3.4/3.13 (target ``analytic``, no training).

- Figure 3.3: Q/K/V weights of one attention sublayer against the number of heads (dim 64), for
  every chapter-3 softmax variant (Table 3.4's convention: output projection excluded; the
  thesis's prose: MHA passes 200M at 128 heads, SKV/MQA/EL-ATT need 2/3, 1/3, 1/3, MHE about 1%).
- Figure 3.4: those weights over 12, 24 and 48 layers with 32 and 64 heads.
- gpt3_projection (§3.5.4): the same at GPT-3's scale (96 layers, 96 heads of 128).
- ch3_parameter_counts: the attention weights of every variant in every chapter-3 model at the
  thesis's scale (params/paper.yaml, built through build_model on the meta device), beside every
  #params the thesis prints (Tables 3.1-3.3, 3.14, 3.15).

Everything is counted from instantiated modules; the thesis's values are shown, never used.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.io import atomic_path
from leanlm.reporting import figures
from leanlm.reporting.analytic import _reported, ch3_variants, qkv_block_parameters
from leanlm.reporting.ch3.counts import thesis_count
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.render import Table, column_cells, fmt_count, fmt_number, write_table
from leanlm.reporting.reported import thesis_label

log = logging.getLogger(__name__)

HEAD_DIM = 64
# Figure 3.3's x axis: head counts from 1 to the 128 of the thesis's prose.
FIGURE_3_3_HEADS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128]
FIGURE_3_4_LAYERS = [12, 24, 48]
FIGURE_3_4_HEADS = [32, 64]
# GPT-3 (Brown et al., 2020) as §3.5.4 describes it.
GPT3 = {"n_layers": 96, "n_heads": 96, "head_dim": 128}


def _write_csv(frame: pd.DataFrame, path: Path) -> Path:
    with atomic_path(path, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    return path


def _series() -> list[tuple[str, str]]:
    """(column, legend label) per drawn variant; MHE-ADD and MHE-MUL count alike: one MHE line."""
    out = []
    for name in ch3_variants():
        if name == "mhe_add" and "mhe_mul" in ch3_variants():
            continue
        out.append((f"params_{name}", "MHE" if name == "mhe_mul" else thesis_label(name)))
    return out


# ----------------------------------------------------------------------------- Figure 3.3
def figure_3_3_frame(heads=FIGURE_3_3_HEADS, d: int = HEAD_DIM) -> pd.DataFrame:
    """Q/K/V weights of one sublayer with n heads of dim d (d_m = n d), per variant."""
    return pd.DataFrame([{"n_heads": n, **{f"params_{v}": qkv_block_parameters(v, n, d) for v in ch3_variants()}}
                         for n in heads])


def figure_3_3(profile: str) -> list[Path]:
    """Figure 3.3 as .pdf and .png, and the plotted values as .csv."""
    frame = figure_3_3_frame()
    base = paths.tables_dir(profile) / "figure_3_3"
    csv = _write_csv(frame, base.with_suffix(".csv"))
    plotted = frame.assign(**{c: frame[c] / 1e6 for c, _ in _series()})
    images = figures.line_plot(plotted, "n_heads", _series(), xlabel="number of attention heads (head dimension 64)",
                               ylabel="parameters per attention sublayer (M)", base=base, logy=True)
    return images + [csv]


# ----------------------------------------------------------------------------- Figure 3.4
def figure_3_4_frame(layers=FIGURE_3_4_LAYERS, heads=FIGURE_3_4_HEADS, d: int = HEAD_DIM) -> pd.DataFrame:
    """Q/K/V weights of ``layers`` sublayers with n heads of dim d, per variant (one row per layers x heads)."""
    per_block = {(v, n): qkv_block_parameters(v, n, d) for v in ch3_variants() for n in heads}
    rows = [{"n_layers": n_layers, "n_heads": n, "config": f"{n_layers}L / {n}H",
             **{f"params_{v}": n_layers * per_block[(v, n)] for v in ch3_variants()}}
            for n in heads for n_layers in layers]
    return pd.DataFrame(rows)


def figure_3_4(profile: str) -> list[Path]:
    """Figure 3.4 as .pdf and .png, and the plotted values as .csv."""
    frame = figure_3_4_frame()
    base = paths.tables_dir(profile) / "figure_3_4"
    csv = _write_csv(frame, base.with_suffix(".csv"))
    plotted = frame.assign(**{c: frame[c] / 1e9 for c, _ in _series()})
    images = figures.bar_plot(plotted, "config", _series(), xlabel="attention layers / heads (head dimension 64)",
                              ylabel="attention parameters (B)", base=base)
    return images + [csv]


# ----------------------------------------------------------------------------- GPT-3 projection
def fmt_billions(n: float) -> str:
    """A count in billions as §3.5.4 prints it: 43.49B."""
    return f"{n / 1e9:.2f}B"


def gpt3_projection_frame() -> pd.DataFrame:
    """Q/K/V weights of all 96 GPT-3 layers (96 heads of 128) per variant, and the saving against MHA (%)."""
    reported = _reported("gpt3_projection")
    n, d, layers = GPT3["n_heads"], GPT3["head_dim"], GPT3["n_layers"]
    rows = []
    for name in ch3_variants():
        label = thesis_label(name)
        rep = reported.loc[label] if reported is not None and label in reported.index else None
        rows.append({"attention": label, "name": name, "params": layers * qkv_block_parameters(name, n, d),
                     "reported_params": "" if rep is None else rep["params"],
                     "reported_reduction_vs_mha": None if rep is None else rep["reduction_vs_mha"]})
    frame = pd.DataFrame(rows)
    mha = frame.loc[frame["name"] == "mha", "params"]
    if mha.empty:
        raise LeanLMError("the GPT-3 projection compares with MHA, but attention 'mha' is not registered")
    frame["reduction_vs_mha"] = 100.0 * (1.0 - frame["params"] / float(mha.iloc[0]))
    frame["reported_reduction_vs_mha"] = pd.to_numeric(frame["reported_reduction_vs_mha"], errors="coerce")
    return frame


def gpt3_projection(profile: str) -> list[Path]:
    """§3.5.4's projection to GPT-3 as a small table (.tex and .csv), beside the printed numbers."""
    frame = gpt3_projection_frame()
    notes = Notes()
    mha = frame.index[frame["name"] == "mha"].tolist()
    ours = [column_cells([fmt_billions(v) for v in frame["params"]], frame["params"].tolist(), False, 2),
            column_cells([fmt_number(v, 1) for v in frame["reduction_vs_mha"]], frame["reduction_vs_mha"].tolist(),
                         True, 1, exclude=mha)]
    rows = []
    for i, row in frame.iterrows():
        printed = None
        if row["reported_params"]:
            params_note = (None if fmt_billions(row["params"]) == row["reported_params"] else
                           f"The thesis prints {row['reported_params']} for {row['attention']}; the count is "
                           f"{row['params']:,} ({fmt_billions(row['params'])}): the printed value is cut, not rounded.")
            reduction = row["reported_reduction_vs_mha"]
            reduction_note = (None if pd.isna(reduction) or fmt_number(row["reduction_vs_mha"], 1) == fmt_number(reduction, 1)
                              else f"The thesis prints a {fmt_number(reduction, 1)}% reduction for MHE "
                                   f"(\"approximately\"); the counts give {row['reduction_vs_mha']:.3f}%.")
            printed = [notes.marked(Cell(row["reported_params"]), params_note),
                       notes.marked(Cell(fmt_number(reduction, 1)), reduction_note)]
        rows.append(grid_row(row["attention"], [ours[0][i], ours[1][i]], printed))
    caption = (
        "Attention parameters projected to GPT-3 (§3.5.4): 96 decoder layers with 96 heads of dimension 128 "
        "(d_m = 12288), Q, K and V projections of all layers (Table 3.4's count, output projection excluded), "
        "counted from instantiated modules, and the reduction against MHA (%); the thesis's printed values are in "
        "the row below (it prints no SHA value). Independent of the profile. Bold: best per column."
    )
    columns = [Column("#Params", arrow="↓"), Column("Reduction vs MHA (%)", arrow="↑")]
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, font="small")
    return write_table(profile, "gpt3_projection", Table(frame=frame, context=context))


# ----------------------------------------------------------------------------- ch3_parameter_counts
# Every chapter-3 model size: key, printed column header, group, the paper profile's size name, and
# where the thesis prints its #params: (table, row label or None = the variant's own row, column).
COUNT_CONFIGS = [
    ("encoder_base", "BASE", "Encoder-only", "bert",
     [("table_3_1", None, "params"), ("table_3_14", "Encoder-only BASE", "params_{v}")]),
    ("encoder_large", "LARGE", "Encoder-only", "bert_large", [("table_3_14", "Encoder-only LARGE", "params_{v}")]),
    ("decoder_base", "BASE", "Decoder-only", "gpt2",
     [("table_3_2", None, "params"), ("table_3_14", "Decoder-only BASE", "params_{v}")]),
    ("decoder_medium", "MEDIUM", "Decoder-only", "gpt2_medium", [("table_3_14", "Decoder-only MEDIUM", "params_{v}")]),
    ("encdec_base", "BASE", "Encoder-decoder", "transformer",
     [("table_3_3", None, "params"), ("table_3_15", "BASE", "params_{v}")]),
    ("encdec_h16", "d_h=32", "Encoder-decoder", "transformer_h16", [("table_3_15", "BASE (d_h=32)", "params_{v}")]),
    ("encdec_h4", "d_h=128", "Encoder-decoder", "transformer_h4", [("table_3_15", "BASE (d_h=128)", "params_{v}")]),
    ("encdec_4l", "4L", "Encoder-decoder", "transformer_4l", [("table_3_15", "4L", "params_{v}")]),
    ("encdec_8l", "8L", "Encoder-decoder", "transformer_8l", [("table_3_15", "8L", "params_{v}")]),
    ("encdec_12h", "12H", "Encoder-decoder", "transformer_12h", [("table_3_15", "12H", "params_{v}")]),
    ("encdec_big", "BIG", "Encoder-decoder", "transformer_big", [("table_3_15", "BIG", "params_{v}")]),
]


def _printed(sources: list, variant: str) -> tuple[str, list[str]]:
    """The thesis's printed count of ``variant`` in a configuration, and the tables that print it."""
    values, tables = [], []
    for table, row, column in sources:
        reported = _reported(table)
        key = thesis_label(variant) if row is None else row
        column = column.format(v=variant)
        if reported is None or key not in reported.index or column not in reported.columns:
            continue
        value = reported.loc[key, column]
        if isinstance(value, str) and value.strip() not in ("", "-"):
            values.append(value.strip())
            tables.append(table.replace("table_", "Table ").replace("_", "."))
    if len(set(values)) > 1:
        raise LeanLMError(f"params/reported: {', '.join(tables)} print different #params for {variant}: {values}")
    return (values[0] if values else ""), tables


def ch3_parameter_counts_frame() -> pd.DataFrame:
    """One row per (variant, configuration): the counted attention weights at the thesis's scale and
    the printed value (empty where the thesis prints none)."""
    rows = []
    for name in ch3_variants():
        for key, header, group, size, sources in COUNT_CONFIGS:
            count = thesis_count(size, name)
            printed, tables = _printed(sources, name)
            m = count.model
            rows.append({
                "attention": thesis_label(name), "name": name, "config": key, "label": f"{group} {header}",
                "size": size, "backbone": m["backbone"], "n_layers": m["n_layers"],
                "n_decoder_layers": m.get("n_decoder_layers", 0), "d_model": m["d_model"], "n_heads": m["n_heads"],
                "head_dim": m["head_dim"], "blocks": count.blocks, "params": count.params,
                "formatted": fmt_count(count.params), "reported": printed, "reported_in": ", ".join(tables),
                "matches": (fmt_count(count.params) == printed) if printed else None,
            })
    return pd.DataFrame(rows)


def ch3_parameter_counts(profile: str) -> list[Path]:
    """Every variant x every chapter-3 model at the thesis's scale, beside the printed #params (.tex, .csv)."""
    frame = ch3_parameter_counts_frame()
    notes = Notes()
    columns = [Column(header, group) for _, header, group, _, _ in COUNT_CONFIGS]
    rows = []
    for name in ch3_variants():
        part = frame[frame["name"] == name].set_index("config")
        ours = [Cell(part.loc[key, "formatted"]) for key, *_ in COUNT_CONFIGS]
        printed = []
        for key, *_ in COUNT_CONFIGS:
            row = part.loc[key]
            note = None
            if row["reported"] and not row["matches"]:
                note = (f"{row['reported_in']} print{'s' if ',' not in row['reported_in'] else ''} "
                        f"{row['reported']} for {row['attention']} ({row['label']}), where its {row['blocks']} "
                        f"attention blocks count {row['params']:,} ({row['formatted']}); the count is kept.")
            printed.append(notes.marked(Cell(row["reported"] or "-"), note))
        rows.append(grid_row(thesis_label(name), ours, printed if any(c.text != "-" for c in printed) else None))
    caption = (
        "Attention parameters of every chapter-3 model at the thesis's scale (params/paper.yaml), counted from "
        "models built through build_model on the meta device: weights without biases, head embeddings and output "
        "projections included, self- and cross-attention of encoder-decoders (N = encoder + decoder layers). The "
        "thesis's printed #params (Tables 3.1-3.3, 3.14, 3.15) are in the row below; '-' where it prints none. "
        "Independent of the profile."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, landscape=True)
    return write_table(profile, "ch3_parameter_counts", Table(frame=frame, context=context))
