"""Outputs that need no training: parameter counts, memory and their figures (target ``analytic``).

Every number here is counted from an attention module built at the given size (on PyTorch's
``meta`` device: shapes without memory, so a 64-head MHA costs nothing), never typed in. The
thesis's printed values (params/reported/) are shown beside, so a wrong count is visible at once.
These outputs are at the thesis's scale (BERT-base: 12 heads of 64) whatever the profile.

Each item is a function that writes its files and returns their paths, named by dotted path in
params/tables.yaml (:data:`ANALYTIC`); the chapters' counting tables (2.2, 4.x) and chapter 3's further
items (Figures 3.3 and 3.4, the GPT-3 projection, the thesis-scale parameter counts) live in their
chapter's folder (:mod:`leanlm.reporting.ch3.analytic`, ...), which this module never imports.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.io import atomic_path
from leanlm.modeling.attention import ATTENTION, build_attention
from leanlm.modeling.counting import attention_block_memory, attention_formula, attention_parameters, qkv_parameters
from leanlm.registry import DottedRegistry
from leanlm.reporting import figures
from leanlm.reporting.latex import Cell
from leanlm.reporting.render import THESIS_SCALE, Table, column_cells, fmt_number, renderers, write_table
from leanlm.reporting.reported import load_reported, reported_row, thesis_label

log = logging.getLogger(__name__)

# Registered by dotted path in params/tables.yaml (kind analytic, ``renderer:``), imported only when written.
ANALYTIC: DottedRegistry[Callable[[str], list[Path]]] = DottedRegistry("analytic item", lambda: renderers("analytic"),
                                                                      within="leanlm.reporting")

# Chapter 3's attention variants in the thesis's row order; a row appears once its variant is registered.
CH3_VARIANTS = ["sha", "mha", "el_att", "mqa", "skv", "mhe_add", "mhe_mul"]

# Appendix 3.10: memory per attention block for a batch of 32 sequences of 512 tokens.
MEMORY_BATCH_SIZE = 32
MEMORY_SEQ_LEN = 512


def ch3_variants() -> list[str]:
    """The softmax variants of Tables 3.4 and 3.13, in the thesis's row order.

    The token mixers "fnet" and "linear" are registered too but left out on purpose: the thesis
    gives them no row in either table (only GLUE/SuperGLUE scores, Tables 3.5-3.8), FNet has no
    W^O for Table 3.4's "projection excluded" convention, and Linear's count depends on the
    sequence length, not on n and d.
    """
    return [name for name in CH3_VARIANTS if name in ATTENTION]


def counting_module(name: str, n_heads: int, head_dim: int):
    """Attention ``name`` with n heads of ``head_dim`` and d_m = n * head_dim, on the meta device."""
    with torch.device("meta"):
        return build_attention(name, d_model=n_heads * head_dim, n_heads=n_heads, head_dim=head_dim, dropout=0.0)


def block_parameters(name: str, n_heads: int, head_dim: int) -> int:
    """Weights of one attention block, output projection included (Table 3.13's count)."""
    return attention_parameters(counting_module(name, n_heads, head_dim))


def qkv_block_parameters(name: str, n_heads: int, head_dim: int) -> int:
    """Weights of the Q/K/V projections of one block (Table 3.4, Figure 3.1)."""
    return qkv_parameters(counting_module(name, n_heads, head_dim))


def _same_latex(a: str, b: str) -> bool:
    return re.sub(r"\s+", "", str(a)) == re.sub(r"\s+", "", str(b))


def _reported(name: str) -> pd.DataFrame | None:
    try:
        return load_reported(name)
    except LeanLMError:
        log.warning("params/reported/%s.csv is missing: %s is rendered without the thesis's values", name, name)
        return None


# ----------------------------------------------------------------------------- Table 3.4
def table_3_4_frame(n: int = THESIS_SCALE["n_heads"], d: int = THESIS_SCALE["head_dim"]) -> pd.DataFrame:
    """Table 3.4 at n heads of dim d: each variant's closed forms and its counted Q/K/V weights.

    A count that disagrees with the variant's own closed form is a bug in the variant: an error.
    """
    reported = _reported("table_3_4")
    sha = qkv_block_parameters("sha", n, d)
    rows = []
    for name in ch3_variants():
        formula = attention_formula(name, n, d)
        counted = qkv_block_parameters(name, n, d)
        if counted != formula["params"]:
            raise LeanLMError(
                f"attention {name!r}: {counted:,} Q/K/V weights counted at n={n}, d={d}, but its Table 3.4 "
                f"formula gives {formula['params']:,}; fix the variant or its qkv_parameter_formula"
            )
        rep = reported_row(reported, name) if reported is not None else None
        rows.append({
            "attention": thesis_label(name),
            "complexity": formula["latex"]["complexity"],
            "params_formula": formula["latex"]["params"],
            "params_extra_formula": formula["latex"]["params_extra"],
            "params": counted,
            "params_extra": counted - sha,
            "formula_params": formula["params"],
            "formula_params_extra": formula["params_extra"],
            "reported_complexity": None if rep is None else rep["complexity"],
            "reported_params_formula": None if rep is None else rep["params"],
            "reported_params_extra_formula": None if rep is None else rep["params_extra"],
        })
    return pd.DataFrame(rows)


def table_3_4(profile: str) -> list[Path]:
    """Table 3.4 (formulas, and counts at BERT-base) as .tex and .csv."""
    n, d = THESIS_SCALE["n_heads"], THESIS_SCALE["head_dim"]
    frame = table_3_4_frame(n, d)
    params_cells = column_cells([f"{v:,}" for v in frame["params"]], frame["params"].tolist(), False, 0)
    extra_cells = column_cells([f"{v:,}" for v in frame["params_extra"]], frame["params_extra"].tolist(), False, 0)
    rows, notes = [], []
    for i, row in enumerate(frame.itertuples()):
        formulas = []
        pairs = ((row.complexity, row.reported_complexity), (row.params_formula, row.reported_params_formula),
                 (row.params_extra_formula, row.reported_params_extra_formula))
        for ours, printed in pairs:
            mark = ""
            # A variant whose declared form differs from the printed one gets a note showing the printed form.
            if isinstance(printed, str) and not _same_latex(ours, printed):
                mark = "abcdefghijklmnopqrstuvwxyz"[len(notes) % 26]
                notes.append({"mark": mark, "text": f"{row.attention}: the thesis prints", "latex": printed})
            formulas.append(Cell(ours, mark=mark, raw=True))
        rows.append({"label": Cell(row.attention), "cells": [*formulas, params_cells[i], extra_cells[i]]})
    context = {"n": n, "d": d, "rows": rows, "notes": notes}
    return write_table(profile, "table_3_4", Table(frame=frame, context=context))


# ----------------------------------------------------------------------------- Table 3.13
MEMORY_COLUMNS = ["weights", "gradients", "adam_states", "activations", "total"]


def table_3_13_frame(n: int = THESIS_SCALE["n_heads"], d: int = THESIS_SCALE["head_dim"]) -> pd.DataFrame:
    """Table 3.13: bytes per attention block in fp16 mixed-precision training, saving ratio (%) vs MHA."""
    reported = _reported("table_3_13")
    rows = []
    for name in ch3_variants():
        weights = block_parameters(name, n, d)
        memory = attention_block_memory(weights, MEMORY_BATCH_SIZE, MEMORY_SEQ_LEN, n * d)
        row = {"attention": thesis_label(name), "name": name, "parameters": weights, **memory}
        rep = reported_row(reported, name) if reported is not None else None
        for column in MEMORY_COLUMNS + ["saving_ratio"]:
            row[f"reported_{column}"] = None if rep is None else rep[column]
        rows.append(row)
    frame = pd.DataFrame(rows)
    mha_total = frame.loc[frame["name"] == "mha", "total"]
    if mha_total.empty:
        raise LeanLMError("Table 3.13's saving ratios are relative to MHA, but attention 'mha' is not registered")
    for column in MEMORY_COLUMNS:  # bytes are integers; a row the thesis lacks stays empty
        frame[f"reported_{column}"] = frame[f"reported_{column}"].astype("Int64")
    frame["saving_ratio"] = 100.0 * (1.0 - frame["total"] / float(mha_total.iloc[0]))
    ours = ["attention", "name", "parameters", *MEMORY_COLUMNS, "saving_ratio"]
    return frame[ours + [c for c in frame.columns if c not in ours]]


def table_3_13(profile: str) -> list[Path]:
    """Table 3.13 (memory per attention block at BERT-base, beside the printed values) as .tex and .csv."""
    frame = table_3_13_frame()
    computed = [column_cells([str(v) for v in frame[c]], frame[c].tolist(), False, 0) for c in MEMORY_COLUMNS]
    computed.append(column_cells([fmt_number(v, 2) for v in frame["saving_ratio"]], frame["saving_ratio"].tolist(),
                                 True, 2, exclude=frame.index[frame["name"] == "mha"].tolist()))
    rows = []
    for i, row in enumerate(frame.itertuples()):
        printed = [getattr(row, f"reported_{c}") for c in MEMORY_COLUMNS + ["saving_ratio"]]
        rows.append({
            "label": Cell(row.attention),
            "cells": [column[i] for column in computed],
            "reported": None if printed[0] is None else
            [Cell(str(int(v))) for v in printed[:-1]] + [Cell(fmt_number(printed[-1], 2))],
        })
    context = {
        "n": THESIS_SCALE["n_heads"], "d": THESIS_SCALE["head_dim"],
        "batch_size": MEMORY_BATCH_SIZE, "seq_len": MEMORY_SEQ_LEN, "rows": rows,
    }
    return write_table(profile, "table_3_13", Table(frame=frame, context=context))


# ----------------------------------------------------------------------------- Figure 3.1
def figure_3_1_frame(max_heads: int = 64, d: int = THESIS_SCALE["head_dim"]) -> pd.DataFrame:
    """Q/K/V weights of one attention sublayer for n = 1..max_heads heads of dim d: MHA vs MHE."""
    variants = [v for v in ("mha", "mhe_add", "mhe_mul") if v in ATTENTION]
    rows = [{"n_heads": n, **{f"params_{v}": qkv_block_parameters(v, n, d) for v in variants}}
            for n in range(1, max_heads + 1)]
    return pd.DataFrame(rows)


def figure_3_1(profile: str) -> list[Path]:
    """Figure 3.1 as .pdf and .png, and the plotted values as .csv."""
    frame = figure_3_1_frame()
    base = paths.tables_dir(profile) / "figure_3_1"
    csv = base.with_suffix(".csv")
    with atomic_path(csv, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    # MHE-ADD and MHE-MUL have the same count; the thesis draws one MHE line.
    plotted = frame.assign(mha_m=frame["params_mha"] / 1e6, mhe_m=frame["params_mhe_mul"] / 1e6)
    images = figures.line_plot(
        plotted, "n_heads", [("mha_m", "MHA"), ("mhe_m", "MHE")],
        xlabel="number of attention heads (head dimension 64)",
        ylabel="parameters of Q, K, V projections (M)",
        base=base,
        annotate_last=True,
    )
    log.info("drew %s and %s", images[0], images[1])
    return images + [csv]


def main(profile: str, name: str | None = None) -> list[Path]:
    """Write one analytic item (``name``) or all of them to paper_tables/<profile>/."""
    names = [name] if name else ANALYTIC.names()
    written = []
    for item in names:
        written += ANALYTIC.get(item)(profile)
    return written
