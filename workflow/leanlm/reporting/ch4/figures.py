"""Chapter 4's attention-analysis figures, from each run's analysis.json (ch4.records.read_analysis).

- Figure 4.1: radar plots of the eight indicators (H ENTROPY, C CONC, HD HEADDIV, LF0-LF3
  LOCFOC_N, S SINK) at a few layers, for Standard and the five token-mixing variants (Approx.,
  Non-apx., RndEmbQK, FixedSeqQK, StaticEmbQK) in the uniform (top) and hybrid (bottom) configuration.
- Figures 4.7 and 4.8 (their "full versions"): every layer, as a grid of indicators x layers per
  model; 4.7 for those variants, 4.8 for Non-apx. and RndEmbQK in both configurations.
- Figure 4.2: pre-softmax logits of RndEmbQK (left) and Non-apx. (right) in the hybrid's simple
  layers, uniform against hybrid (range, 5-95% band, median; symmetric-log axis: outliers beyond
  10^3 against values below 10^1 in the thesis).
- Figure 4.6: every layer's logit histogram, uniform and hybrid overlaid.

Indicators are shown as §4.4's footnote 5 says: ENTROPY, CONC and HEADDIV min-max normalised over
everything one figure shows, SINK as is, LOCFOC_N doubled. Each figure writes .pdf, .png and the
plotted values as .csv.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from leanlm import paths
from leanlm.evaluation.indicators import INDICATORS, normalise_indicators
from leanlm.errors import LeanLMError
from leanlm.modeling.layouts import SIMPLE, layer_kinds
from leanlm.reporting.ch4.records import Analysis, Ch4Row, experiment_rows, read_analysis, variant_label
from leanlm.reporting.figures import STYLE, save_figure, write_csv

AXES = {"ENTROPY": "H", "CONC": "C", "HEADDIV": "HD", "LOCFOC_0": "LF0", "LOCFOC_1": "LF1", "LOCFOC_2": "LF2",
        "LOCFOC_3": "LF3", "SINK": "S"}
MIXING_VARIANTS = ["approximate", "non_approximate", "rnd_emb_qk", "fixed_seq_qk", "static_emb_qk"]
CONFIG_VARIANTS = ["non_approximate", "rnd_emb_qk"]
CONFIGS = ["uniform", "hybrid"]
RADAR_LAYERS = 4
HEADS = {"uniform": "Uniform", "hybrid": "Hybrid"}


def analysed(profile: str, config: dict, name: str, variants: Sequence[str]) -> list[tuple[Ch4Row, Analysis]]:
    """Standard and ``variants`` in the uniform and (when the profile runs it) hybrid configuration."""
    rows = experiment_rows(config, ["ch4_uniform"], name, HEADS, optional=["ch4_hybrid"])
    keep = [r for r in rows if r.config == "standard" or (r.variant in variants and r.config in CONFIGS)]
    if not any(r.config != "standard" for r in keep):
        raise LeanLMError(f"{name} needs runs of {', '.join(variants)} in ch4_uniform or ch4_hybrid; the profile's "
                          "matrix has none")
    return [(r, read_analysis(profile, r.run_id)) for r in keep]


def indicator_frame(models: list[tuple[Ch4Row, Analysis]]) -> pd.DataFrame:
    """Long frame: one row per (model, layer, indicator) with the raw and the shown (normalised) value."""
    records = []
    for row, analysis in models:
        for layer, values in analysis.indicators.iterrows():
            records.append({"run_id": row.run_id, "label": row.label, "config": row.config, "variant": row.variant,
                            "layer": int(layer), "kind": analysis.kinds.get(int(layer), ""),
                            **{k: float(values[k]) for k in INDICATORS}})
    if not records:
        raise LeanLMError("no attention indicators in the analysis records of "
                          + ", ".join(r.run_id for r, _ in models) + "; rerun their analysis jobs")
    shown = normalise_indicators([{k: r[k] for k in INDICATORS if not math.isnan(r[k])} for r in records])
    long = []
    for record, values in zip(records, shown):
        for name in INDICATORS:
            long.append({**{k: v for k, v in record.items() if k not in INDICATORS}, "indicator": name,
                         "value": record[name], "shown": values.get(name, math.nan)})
    return pd.DataFrame(long)


def representative_layers(layers: Sequence[int], n: int = RADAR_LAYERS) -> list[int]:
    """Up to ``n`` layers spread from the first to the last (1, 9, 16, 24 of 24)."""
    layers = sorted(layers)
    if len(layers) <= n:
        return layers
    picks = np.linspace(0, len(layers) - 1, n).round().astype(int)
    return [layers[i] for i in dict.fromkeys(picks)]


def _panel_grid(frame: pd.DataFrame, variants: Sequence[str]):
    """(row, column) of each model in the figures: Standard top left, then variants; rows = configs."""
    cells = {}
    for run_id, part in frame.groupby("run_id", sort=False):
        config, variant = part["config"].iloc[0], part["variant"].iloc[0]
        if config == "standard":
            cells[(0, 0)] = run_id
        elif variant in variants:
            cells[(CONFIGS.index(config), 1 + list(variants).index(variant))] = run_id
    return cells


def _title(part: pd.DataFrame) -> str:
    config, variant = part["config"].iloc[0], part["variant"].iloc[0]
    return "Standard" if config == "standard" else f"{variant_label(variant)} ({config})"


def radar_figure(frame: pd.DataFrame, variants: Sequence[str], base: Path) -> list[Path]:
    cells = _panel_grid(frame, variants)
    n_rows, n_cols = 1 + max(r for r, _ in cells), 1 + len(variants)
    labels = [AXES[k] for k in INDICATORS]
    angles = np.linspace(0, 2 * np.pi, len(labels), endpoint=False)
    top = max(1.0, float(np.nanmax(frame["shown"])))
    with plt.rc_context({**STYLE, "figure.figsize": (2.0 * n_cols, 2.3 * n_rows), "font.size": 6}):
        fig, axes = plt.subplots(n_rows, n_cols, subplot_kw={"projection": "polar"}, squeeze=False,
                                 constrained_layout=True)
        for (r, c), ax in np.ndenumerate(axes):
            if (r, c) not in cells:
                ax.set_axis_off()
                continue
            part = frame[frame["run_id"] == cells[(r, c)]]
            for layer in representative_layers(part["layer"].unique()):
                values = part[part["layer"] == layer].set_index("indicator").loc[list(INDICATORS), "shown"].to_numpy()
                ax.plot(np.append(angles, angles[0]), np.append(values, values[0]), linewidth=1, label=f"L{layer}")
                ax.fill(angles, values, alpha=0.08)
            ax.set_xticks(angles)
            ax.set_xticklabels(labels)
            ax.set_ylim(0, top)
            ax.set_yticklabels([])
            ax.set_title(_title(part), fontsize=7, pad=12)
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncol=len(names), title="layer", fontsize=6)
        return save_figure(fig, base)


def grid_figure(frame: pd.DataFrame, variants: Sequence[str], base: Path) -> list[Path]:
    """Per model, indicators (rows) x layers (columns), the shown values as colour."""
    cells = _panel_grid(frame, variants)
    n_rows, n_cols = 1 + max(r for r, _ in cells), 1 + len(variants)
    n_layers = int(frame["layer"].max())
    top = max(1.0, float(np.nanmax(frame["shown"])))
    with plt.rc_context({**STYLE, "figure.figsize": (max(2.0, 0.12 * n_layers + 1.2) * n_cols, 1.8 * n_rows),
                         "font.size": 6, "axes.grid": False}):
        fig, axes = plt.subplots(n_rows, n_cols, squeeze=False, constrained_layout=True)
        image = None
        for (r, c), ax in np.ndenumerate(axes):
            if (r, c) not in cells:
                ax.set_axis_off()
                continue
            part = frame[frame["run_id"] == cells[(r, c)]]
            table = part.pivot(index="indicator", columns="layer", values="shown").reindex(list(INDICATORS))
            extent = (table.columns.min() - 0.5, table.columns.max() + 0.5, len(INDICATORS) - 0.5, -0.5)
            image = ax.imshow(table.to_numpy(dtype=float), aspect="auto", vmin=0, vmax=top, cmap="viridis",
                              extent=extent)
            ax.set_yticks(range(len(INDICATORS)))
            ax.set_yticklabels([AXES[k] for k in INDICATORS])
            ax.set_xlabel("layer")
            ax.set_title(_title(part), fontsize=7)
        if image is not None:
            fig.colorbar(image, ax=axes, shrink=0.8, label="shown value (H, C, HD min-max; LF x2)")
        return save_figure(fig, base)


def indicator_figure(profile: str, config: dict, name: str, variants: Sequence[str], style: str) -> list[Path]:
    frame = indicator_frame(analysed(profile, config, name, variants))
    base = paths.tables_dir(profile) / name
    csv = write_csv(frame, base.with_suffix(".csv"))
    draw = radar_figure if style == "radar" else grid_figure
    return draw(frame, variants, base) + [csv]


def figure_4_1(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Radar plots of the attention indicators at representative layers (Figure 4.1)."""
    return indicator_figure(profile, config, "figure_4_1", MIXING_VARIANTS, "radar")


def figure_4_7(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Every layer's indicators for Standard and the five token-mixing variants (Figure 4.7)."""
    return indicator_figure(profile, config, "figure_4_7", MIXING_VARIANTS, "grid")


def figure_4_8(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Every layer's indicators for Non-apx. and RndEmbQK, uniform and hybrid, and Standard (Figure 4.8)."""
    return indicator_figure(profile, config, "figure_4_8", CONFIG_VARIANTS, "grid")


# ----------------------------------------------------------------------------- logits (4.2, 4.6)
def histogram_quantiles(hist: dict, qs: Sequence[float]) -> list[float]:
    """Quantiles of the values a logit_histogram counted, interpolated linearly inside bins."""
    edges = np.asarray(hist["edges"], dtype=float)
    counts = np.asarray(hist["counts"], dtype=float)
    cum = np.concatenate([[0.0], np.cumsum(counts)])
    if cum[-1] <= 0:
        return [math.nan for _ in qs]
    return [float(np.interp(q * cum[-1], cum, edges)) for q in qs]


def logit_frame(models: list[tuple[Ch4Row, Analysis]]) -> pd.DataFrame:
    rows = []
    for row, analysis in models:
        n = int(row.run.model["n_layers"])
        for layer, hist in sorted(analysis.logits.items()):
            kind = analysis.kinds.get(layer) or (layer_kinds("even", n)[layer - 1] if row.config == "hybrid"
                                                 and 1 <= layer <= n else "simple")
            q05, q50, q95 = histogram_quantiles(hist, (0.05, 0.5, 0.95))
            magnitude = bool(hist.get("magnitude", False))
            rows.append({"run_id": row.run_id, "config": row.config, "variant": row.variant, "layer": layer,
                         "kind": kind, "magnitude": magnitude, "q05": q05, "median": q50, "q95": q95,
                         "low": 0.0 if magnitude else hist.get("min", math.nan),
                         "high": hist.get("abs_max" if magnitude else "max", math.nan),
                         "min": hist.get("min", math.nan), "max": hist.get("max", math.nan),
                         "abs_max": hist.get("abs_max", math.nan)})
    if not rows:
        raise LeanLMError("no pre-softmax logit histograms in the analysis records of "
                          + ", ".join(r.run_id for r, _ in models) + "; rerun their analysis jobs")
    return pd.DataFrame(rows)


def _logit_models(profile: str, config: dict, name: str) -> list[tuple[Ch4Row, Analysis]]:
    return [(r, a) for r, a in analysed(profile, config, name, CONFIG_VARIANTS) if r.config != "standard"]


def figure_4_2(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Pre-softmax logits of RndEmbQK and Non-apx. at the hybrid's simple layers, uniform vs hybrid (Figure 4.2)."""
    frame = logit_frame(_logit_models(profile, config, "figure_4_2"))
    hybrid_simple = set(frame.loc[(frame["config"] == "hybrid") & (frame["kind"] == SIMPLE), "layer"])
    shown = frame[frame["layer"].isin(hybrid_simple)] if hybrid_simple else frame
    base = paths.tables_dir(profile) / "figure_4_2"
    csv = write_csv(shown, base.with_suffix(".csv"))
    with plt.rc_context({**STYLE, "figure.figsize": (7.0, 3.0)}):
        fig, axes = plt.subplots(1, len(CONFIG_VARIANTS), sharey=True, squeeze=False)
        for ax, variant in zip(axes[0], CONFIG_VARIANTS[::-1]):  # RndEmbQK left, Non-apx. right
            for i, config in enumerate(CONFIGS):
                part = shown[(shown["variant"] == variant) & (shown["config"] == config)].sort_values("layer")
                if part.empty:
                    continue
                x = part["layer"] + (i - 0.5) * 0.3
                color = f"C{i}"
                ax.vlines(x, part["q05"], part["high"], color=color, linewidth=0.6)
                ax.vlines(x, part["q05"], part["q95"], color=color, linewidth=3, label=config)
                ax.plot(x, part["median"], "_", color="black", markersize=4)
            # |logit| histograms (the analysis runner's) on a log axis; signed ones on a symmetric log.
            ax.set_yscale("symlog", linthresh=1e-3 if shown["magnitude"].all() else 1.0)
            ax.set_title(variant_label(variant))
            ax.set_xticks(sorted(shown["layer"].unique()))
            ax.set_xlabel("layer")
            ax.legend()
        what = "|pre-softmax logit|" if shown["magnitude"].all() else "pre-softmax logit"
        axes[0][0].set_ylabel(f"{what}: 5-95%, up to max")
        return save_figure(fig, base) + [csv]


def figure_4_6(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Every layer's logit histogram for RndEmbQK and Non-apx., uniform and hybrid overlaid (Figure 4.6)."""
    models = _logit_models(profile, config, "figure_4_6")
    layers = sorted({layer for _, a in models for layer in a.logits})
    if not layers:
        raise LeanLMError("figure_4_6: no pre-softmax logit histograms in the analysis records; rerun their "
                          "analysis jobs")
    records = []
    magnitude = all(h.get("magnitude") for _, a in models for h in a.logits.values())
    with plt.rc_context({**STYLE, "figure.figsize": (6.0, 1.1 * len(layers) + 0.6), "font.size": 6}):
        fig, axes = plt.subplots(len(layers), len(CONFIG_VARIANTS), squeeze=False, sharex="col")
        for col, variant in enumerate(CONFIG_VARIANTS[::-1]):
            axes[0][col].set_title(variant_label(variant))
            for row, layer in enumerate(layers):
                ax = axes[row][col]
                for model, analysis in (m for m in models if m[0].variant == variant):
                    hist = analysis.logits.get(layer)
                    if not hist:
                        continue
                    counts = np.asarray(hist["counts"], dtype=float)
                    share = counts / max(counts.sum(), 1.0)
                    ax.stairs(share, hist["edges"], label=model.config, color=f"C{CONFIGS.index(model.config)}")
                    records += [{"variant": variant, "config": model.config, "layer": layer, "left": a, "right": b,
                                 "count": int(c)} for a, b, c in zip(hist["edges"][:-1], hist["edges"][1:], counts)]
                ax.set_yscale("log")
                ax.set_xscale("symlog", linthresh=1e-3 if magnitude else 1.0)
                if col == 0:
                    ax.set_ylabel(f"layer {layer}")
        axes[0][-1].legend(fontsize=5)
        for ax in axes[-1]:
            ax.set_xlabel("|pre-softmax logit|" if magnitude else "pre-softmax logit")
        base = paths.tables_dir(profile) / "figure_4_6"
        csv = write_csv(pd.DataFrame(records), base.with_suffix(".csv"))
        return save_figure(fig, base) + [csv]
