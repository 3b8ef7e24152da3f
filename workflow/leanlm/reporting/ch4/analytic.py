"""Chapter 4's counting outputs (target ``analytic``, no training).

- Tables 4.5-4.8 (appendices E-H): each variant's printed formula, its value at a tested size and
  the same quantity measured on an instantiated mixer (:mod:`leanlm.reporting.ch4.formulas`), with
  measured / formula; where that is not 1 a footnote says why (the formulas are leading-order).
- Table 4.10 (appendix L): each size's configuration, read from the ModelConfig the pipeline builds,
  beside the printed one, and the parameters of every variant's causal LM built at that size on the
  meta device. The thesis matches them "strictly"; only MLP's integer width cannot be exact, so the
  table fails unless every projected variant equals Standard and MLP is within
  ``MLP_TOLERANCE_PER_LAYER x d`` per layer.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd

from leanlm.errors import LeanLMError
from leanlm.modeling.qwen_sizes import MLP_TOLERANCE_PER_LAYER, TABLE_4_10, qwen_config, table_4_10_rows
from leanlm.reporting.ch4 import formulas as ch4_formulas
from leanlm.reporting.analytic import _reported
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.render import Table, fmt_count, fmt_number, write_table

log = logging.getLogger(__name__)

WHAT = {
    "table_4_5": ("Time complexity of one forward pass without caching (O(.) drops constant factors: the ratio is "
                  "the constant)", "FLOPs measured in one forward"),
    "table_4_6": ("Floating-point operations per iteration (GEMMs) for inference with the cache", "FLOPs measured"),
    "table_4_7": ("Activation memory (bytes) of half-precision training, t = 1", "bytes autograd saves"),
    "table_4_8": ("Cache size (bytes) per layer for half-precision inference", "bytes of the decoding state"),
}
MEASUREMENT = (
    "FLOPs from torch.utils.flop_counter (GEMMs and SDPA's math kernel; the output projection W^O, shared by "
    "every variant, left out as the formulas do; decode = one step after a prefill of L-1 tokens), activation "
    "bytes from autograd's saved tensors in a bf16 training forward, cache bytes from the bf16 decoding state."
)


def _math(formula: str) -> str:
    """A formula as LaTeX math: the printed cells keep their $...$, our class attributes get them."""
    text = str(formula).strip()
    return text if text.startswith("$") else f"${text}$"


def _same(a: str, b: str) -> bool:
    squash = lambda s: re.sub(r"[\s$]", "", str(s))  # noqa: E731
    return squash(a) == squash(b)


def _printed(table: str, label: str, column: str) -> str | None:
    reported = _reported(table)
    key = "Approx." if label == "Approx. (appendix)" else label
    if reported is None or key not in reported.index or column not in reported.columns:
        return None
    value = reported.loc[key, column]
    return None if not isinstance(value, str) or not value.strip() else value


def formula_table(profile: str, table: str, size: dict | None = None) -> list[Path]:
    """One of Tables 4.5-4.8 as .tex and .csv: printed formula, its value, measured value, ratio."""
    size = size or ch4_formulas.TEST_SIZE
    frame = ch4_formulas.ch4_formula_tables(size)[table]
    stages = list(dict.fromkeys(frame["stage"])) if "stage" in frame.columns else [None]
    notes = Notes()
    columns, rows = [], []
    for stage in stages:
        group = "" if stage is None else stage.capitalize()
        columns += [Column("Formula", group, "↓", "l"), Column("Value", group, "↓"),
                    Column("Measured", group, "↓"), Column("Ratio", group)]
    printed_column = {None: "formula", "prefill": "prefill_formula", "decode": "decode_formula"}
    records = []
    for variant in dict.fromkeys(frame["variant"]):
        part = frame[frame["variant"] == variant]
        label = part["label"].iloc[0]
        cells = []
        for stage in stages:
            row = part.iloc[0] if stage is None else part[part["stage"] == stage].iloc[0]
            printed = _printed(table, label, printed_column[stage])
            mark = None
            if printed is not None and not _same(printed, row["formula"]):
                mark = f"{label}: computed with ${row['formula']}$; the thesis prints {printed}"
            shown = printed if printed is not None else row["formula"]
            cells += [Cell(_math(shown), mark=notes.mark(mark) if mark else "", raw=True),
                      Cell(fmt_count(row["formula_value"])), Cell(fmt_count(row["measured"])),
                      Cell(fmt_number(row["ratio"], 2))]
            records.append({**row.to_dict(), "reported_formula": printed or ""})
        rows.append(grid_row(notes.marked(Cell(label), row["note"] or None), cells))
    B, L, d, h = (size[k] for k in ("B", "L", "d", "h"))
    what, measured = WHAT[table]
    caption = (
        f"{what} ({table.replace('table_', 'Table ').replace('_', '.')}): each variant's formula as the thesis prints "
        f"it, its value at B={B}, L={L}, d={d}, h={h} (d_h={d // h}), the {measured} on a mixer instantiated at "
        f"that size, and measured / formula. {MEASUREMENT} 'Approx. (appendix)' is the per-term normalised form "
        "the appendix formulas describe (DESIGN §8 makes the joint form the default). Independent of the profile."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, label_header="Attention",
                           landscape=len(stages) > 1, font="footnotesize")
    return write_table(profile, table, Table(frame=pd.DataFrame(records), context=context))


def table_4_5(profile: str) -> list[Path]:
    return formula_table(profile, "table_4_5")


def table_4_6(profile: str) -> list[Path]:
    return formula_table(profile, "table_4_6")


def table_4_7(profile: str) -> list[Path]:
    return formula_table(profile, "table_4_7")


def table_4_8(profile: str) -> list[Path]:
    return formula_table(profile, "table_4_8")


# ----------------------------------------------------------------------------- Table 4.10
# Printed rows (params/reported/table_4_10.csv) -> how to read them off a size's ModelConfig.
CONFIG_ROWS = [
    ("Hidden Size", lambda c, size: c.d_model),
    ("Intermediate Size", lambda c, size: c.d_ff),
    ("Num of Hidden Layers", lambda c, size: c.n_layers),
    ("Max Window Layers", lambda c, size: TABLE_4_10[size]["max_window_layers"]),  # no sliding window: unused
    ("Num of Attention Heads", lambda c, size: c.n_heads),
    ("Num of Key Value Heads", lambda c, size: c.kv_heads),
]


def count_gaps(frame: pd.DataFrame) -> pd.DataFrame:
    """Per size and variant: |count - Standard's|, the allowed gap and whether it is within it.

    Projected variants share Standard's parameters exactly (allowed 0); the MLP variant's width is
    an integer, so it may differ by up to ``MLP_TOLERANCE_PER_LAYER x d`` in each (simple) layer.
    """
    rows = []
    for record in frame.to_dict("records"):
        standard = record["params_standard"]
        for column in (c for c in frame.columns if c.startswith("params_")):
            variant = column.removeprefix("params_")
            allowed = MLP_TOLERANCE_PER_LAYER * record["hidden"] * record["layers"] if variant == "mlp" else 0
            gap = abs(record[column] - standard)
            rows.append({"size": record["size"], "variant": variant, "params": record[column], "gap": gap,
                         "allowed": allowed, "within": gap <= allowed})
    return pd.DataFrame(rows)


def check_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`count_gaps`, or a LeanLMError naming every count outside its tolerance."""
    gaps = count_gaps(frame)
    bad = gaps[~gaps["within"]]
    if not bad.empty:
        listed = "; ".join(f"{r.size} {r.variant}: {r.params:,} differs from Standard by {r.gap:,} "
                           f"(allowed {r.allowed:,.0f})" for r in bad.itertuples())
        raise LeanLMError(f"Table 4.10: the variants' parameter counts must match (§4.4.2): {listed}; fix the "
                          "variant's projections or the MLP width rule (leanlm.modeling.mixers)")
    return gaps


def table_4_10_frame() -> pd.DataFrame:
    """Per size: configuration (ours and printed), each variant's count, the largest gap and its allowance."""
    frame = table_4_10_rows()
    gaps = check_counts(frame).groupby("size", sort=False).agg(max_gap=("gap", "max"), allowed=("allowed", "max"))
    reported = _reported("table_4_10")
    for label, read in CONFIG_ROWS:
        key = re.sub(r"\W+", "_", label.lower()).strip("_")
        frame[f"config_{key}"] = [read(qwen_config(s), s) for s in frame["size"]]
        column = lambda s: "size_" + s.lower().replace(".", "_")  # noqa: E731
        frame[f"reported_{key}"] = [reported.loc[label, column(s)] if reported is not None and label in reported.index
                                    else None for s in frame["size"]]
    return frame.join(gaps, on="size")


def table_4_10(profile: str) -> list[Path]:
    """Table 4.10 (configurations and each variant's parameter count per size) as .tex and .csv."""
    from leanlm.reporting.ch4.records import variant_label

    frame = table_4_10_frame()
    sizes = list(frame["size"])
    columns = [Column(s, "Model size") for s in sizes]
    rows = []
    for label, _ in CONFIG_ROWS:
        key = re.sub(r"\W+", "_", label.lower()).strip("_")
        printed = [Cell("-" if v is None else str(int(v))) for v in frame[f"reported_{key}"]]
        rows.append(grid_row(label, [Cell(str(v)) for v in frame[f"config_{key}"]], printed))
    variants = [c.removeprefix("params_") for c in frame.columns if c.startswith("params_")]
    for i, variant in enumerate(variants):
        rows.append(grid_row(f"#Params {variant_label(variant)}", [Cell(f"{v:,}") for v in frame[f"params_{variant}"]],
                             rule_before=i == 0))
    rows.append(grid_row("Largest difference", [Cell(f"{v:,}") for v in frame["max_gap"]], rule_before=True))
    rows.append(grid_row("Allowed (MLP width)", [Cell(f"{v:,.0f}") for v in frame["allowed"]]))
    caption = (
        "Details of model configurations for different sizes (Table 4.10), read from the configurations the "
        "pipeline builds (leanlm.modeling.qwen_sizes; max window layers is Qwen2's sliding-window setting, unused), "
        "each above the thesis's printed row, and the parameters of each variant's causal LM at that size, "
        "counted from models built on the meta device (untied input and output embeddings, Pythia's 50,304-row "
        "vocabulary). Every projected variant equals Standard exactly; MLP's integer width keeps it within "
        f"{MLP_TOLERANCE_PER_LAYER} x d per layer (checked: the table is not written otherwise). "
        "Independent of the profile."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, label_header="", font="small")
    return write_table(profile, "table_4_10", Table(frame=frame, context=context))
