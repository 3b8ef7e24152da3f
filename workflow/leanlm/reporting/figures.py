"""Figures: one matplotlib style, atomic PDF + PNG output, and the captions the PDF document uses.

Figures are drawn with the Agg backend (no display needed on a cluster node) and saved without
timestamps, so rerunning an unchanged figure gives byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: never try to open a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from leanlm.io import atomic_path  # noqa: E402

# Captions as the thesis words them; tables.pdf prints them under the figures.
FIGURE_CAPTIONS: dict[str, str] = {
    "figure_3_1": (
        "Number of parameters for an attention sublayer and different number of attention heads using "
        "multi-head attention MHA and multi-head embedding attention MHE (thesis Figure 3.1). The "
        "dimension of attention heads is fixed to 64, only counting the parameters for projecting "
        "queries, keys and values; counted from instantiated modules."
    ),
    "figure_3_3": (
        "Number of parameters per attention sublayer, while scaling the number of attention heads in different "
        "attention variants (thesis Figure 3.3). The dimension of attention heads is fixed to 64; Q, K and V "
        "projections (Table 3.4's count, output projection excluded), counted from instantiated modules; "
        "MHE-ADD and MHE-MUL have the same count (one MHE line)."
    ),
    "figure_3_4": (
        "Total number of parameters in attention sublayers, while scaling the number of attention layers to 12, "
        "24 and 48 with 32 and 64 attention heads respectively (thesis Figure 3.4). The dimension of attention "
        "heads is fixed to 64; Q, K and V projections of all layers, counted from instantiated modules."
    ),
    # Chapter 4 (drawn by leanlm.reporting.ch4.figures and ch4.figures_runs from real runs).
    "figure_4_1": (
        "Layer-wise attention indicators for Approx., Non-apx., RndEmbQK, FixedSeqQK and StaticEmbQK in uniform "
        "(top) and hybrid (bottom) configurations, and Standard (thesis Figure 4.1), at up to four layers spread "
        "over the depth (H: ENTROPY, C: CONC, HD: HEADDIV, LF: LOCFOC_N, S: SINK; H, C, HD min-max normalised "
        "over the figure, LF doubled)."
    ),
    "figure_4_2": (
        "Distribution of pre-softmax activations for RndEmbQK (left) and Non-approximate (right) in the uniform and "
        "hybrid configurations (thesis Figure 4.2), at the hybrid's simple layers: magnitudes |logit| from 5% to 95% "
        "(thick) and up to the largest (thin), median (tick); log axis. See Figure 4.6 for all layers."
    ),
    "figure_4_3": (
        "Performance of RndEmbQK and Non-approximate across nine hybrid configurations (thesis Figure 4.3; layouts "
        "of Table 4.11). The vertical dotted lines represent the Standard baseline."
    ),
    "figure_4_4": (
        "Predictive performance of the models of each size (small, medium and large dots for increasing size) with "
        "different attention mechanisms and configurations on WikiText, ARC-E and SciQ (thesis Figure 4.4); "
        "dotted lines: Standard of the same size."
    ),
    "figure_4_5": "Training loss across all model variants with the profile's model sizes (thesis Figure 4.5).",
    "figure_4_6": (
        "Distribution of raw logits in the pre-softmax activations for RndEmbQK (left) and Non-approximate (right) "
        "in both uniform and hybrid configurations, every layer (thesis Figure 4.6): share of logits per bin, "
        "log scale."
    ),
    "figure_4_7": (
        "Attention matrix characteristics across all layers for Approximate, Non-approximate, RndEmbQK, "
        "FixedSeqQK and StaticEmbQK and their hybrid variants, compared to Standard (thesis Figure 4.7; "
        "H: ENTROPY, C: CONC, HD: HEADDIV, LF: LOCFOC_N, S: SINK)."
    ),
    "figure_4_8": (
        "Attention matrix characteristics across all layers for Non-approximate and RndEmbQK and their hybrid "
        "variants, compared to Standard (thesis Figure 4.8; H: ENTROPY, C: CONC, HD: HEADDIV, LF: LOCFOC_N, "
        "S: SINK)."
    ),
}

STYLE = {
    "figure.figsize": (5.0, 3.4),
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "savefig.bbox": "tight",
}


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    """A figure's plotted data as CSV, written atomically."""
    with atomic_path(path, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    return path


def save_figure(fig: plt.Figure, base: Path) -> list[Path]:
    """Write ``base``.pdf and ``base``.png atomically, close the figure, return both paths."""
    written = []
    for suffix, kwargs in ((".pdf", {"metadata": {"CreationDate": None}}), (".png", {"dpi": 200})):
        path = base.with_suffix(suffix)
        with atomic_path(path, suffix=suffix) as tmp:
            fig.savefig(tmp, format=suffix[1:], **kwargs)
        written.append(path)
    plt.close(fig)
    return written


def line_plot(
    frame: pd.DataFrame,
    x: str,
    series: Sequence[tuple[str, str]],
    xlabel: str,
    ylabel: str,
    base: Path,
    logy: bool = False,
    annotate_last: bool = False,
) -> list[Path]:
    """One line per ``(column, label)`` of ``frame`` against column ``x``; saved as PDF and PNG."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        for (column, label), marker in zip(series, "os^vDx"):
            line, = ax.plot(frame[x], frame[column], marker=marker, markersize=2.5, linewidth=1.2, label=label)
            if annotate_last:  # the value at the right end, where the curves differ most
                last_x, last_y = frame[x].iloc[-1], frame[column].iloc[-1]
                ax.annotate(f"{last_y:,.2f}", (last_x, last_y), xytext=(4, 0), textcoords="offset points",
                            va="center", fontsize=7, color=line.get_color())
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend()
        return save_figure(fig, base)


def bar_plot(
    frame: pd.DataFrame,
    x: str,
    series: Sequence[tuple[str, str]],
    xlabel: str,
    ylabel: str,
    base: Path,
    logy: bool = False,
) -> list[Path]:
    """Grouped bars: one group per row of ``frame`` (labelled by column ``x``), one bar per ``(column, label)``."""
    with plt.rc_context({**STYLE, "figure.figsize": (6.0, 3.4)}):
        fig, ax = plt.subplots()
        width = 0.8 / len(series)
        positions = range(len(frame))
        for i, (column, label) in enumerate(series):
            offsets = [p - 0.4 + width * (i + 0.5) for p in positions]
            ax.bar(offsets, frame[column], width=width, label=label)
        ax.set_xticks(list(positions))
        ax.set_xticklabels(frame[x].astype(str))
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(ncol=2, fontsize=7)
        return save_figure(fig, base)
