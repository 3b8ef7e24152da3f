"""Chapter 4's performance and training figures, from lm-eval results and training histories.

- Figure 4.3: RndEmbQK and Non-apx. across the nine hybrid layouts of Table 4.11 (experiment
  ch4_layouts), one panel per metric, Standard as a vertical dotted line.
- Figure 4.4: every variant and configuration at each model size (ch4_sizes) on WikiText, ARC-E and
  SciQ: small, medium and large dots for the sizes, Standard of each size as a dotted line.
- Figure 4.5: training loss of every model, one panel per size (pretrain.json histories).

Each figure writes .pdf, .png and the plotted values as .csv.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import pandas as pd

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.modeling.layouts import TABLE_4_11_LAYOUTS
from leanlm.reporting.ch4.records import (
    TASK_HEADERS,
    Ch4Row,
    canonical_layout,
    experiment_rows,
    lm_eval_scores,
    read_history,
    size_label,
    size_order,
    variant_label,
)
from leanlm.reporting.figures import STYLE, save_figure, write_csv

HEADS = {"uniform": "UNIFORM", "hybrid": "HYBRID", "skip": "HYBRID SKIP"}
LAYOUT_VARIANTS = ["rnd_emb_qk", "non_approximate"]
PRINTED_LAYOUT = {"even": "even (50%)"}
# (score column, axis label, log scale)
FIGURE_4_3_METRICS = [("avg_acc", "NLU Avg. acc (%)", False), ("wikitext_ppl", "WikiText PPL", True),
                      ("lambada_openai_ppl", "LAMBADA PPL", True), ("lambada_openai_acc", "LAMBADA acc (%)", False)]
FIGURE_4_4_METRICS = [("wikitext_ppl", "WikiText PPL", True),
                      ("arc_easy", f"{TASK_HEADERS['arc_easy']} acc (%)", False),
                      ("sciq", f"{TASK_HEADERS['sciq']} acc (%)", False)]
DOT_SIZES = [12, 30, 60, 100]


def _available(scores: pd.DataFrame, metrics) -> list:
    shown = [m for m in metrics if m[0] in scores.columns and scores[m[0]].notna().any()]
    if not shown:
        raise LeanLMError(f"none of {', '.join(m[0] for m in metrics)} was evaluated by this profile's lm-eval tasks")
    return shown


def _xscale(ax, log: bool) -> None:
    """A log axis whose labels do not collide: matplotlib labels the minor ticks of a log axis that spans
    less than a decade ("4.2x10^5 4.4x10^5 ..." over each other); here the minor ticks stay unlabelled and,
    within a decade, a few evenly spaced major ticks carry short labels (420k, 480k)."""
    if not log:
        return
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(mticker.NullFormatter())
    low, high = ax.get_xlim()
    if low > 0 and high / low < 10:
        ax.xaxis.set_major_locator(mticker.MaxNLocator(nbins=3, min_n_ticks=2))
        ax.xaxis.set_major_formatter(mticker.EngFormatter(sep=""))


def size_shown(run, profile_model: dict | None = None) -> str:
    """A size as the figures label it: the thesis's name ("70M") where the profile's model has that size's
    shape (Table 4.10's layers and width), else what it is: "70M stand-in (2 layers, d 32)"."""
    from leanlm.modeling.qwen_sizes import TABLE_4_10

    label, model = size_label(run), profile_model or run.model
    row = TABLE_4_10.get(label)
    if row is None or (model.get("n_layers"), model.get("d_model")) == (row["layers"], row["hidden"]):
        return label
    return f"{label} stand-in ({model.get('n_layers')} layers, d {model.get('d_model')})"


# ----------------------------------------------------------------------------- Figure 4.3
def figure_4_3(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """RndEmbQK and Non-apx. across the nine hybrid layouts, Standard dotted (Figure 4.3)."""
    name = "figure_4_3"
    rows = experiment_rows(config, ["ch4_layouts", "ch4_uniform"], name, HEADS)
    layouts = [r for r in rows if r.run.experiment == "ch4_layouts" and r.variant in LAYOUT_VARIANTS
               and canonical_layout(r.run.model.get("layout")) in TABLE_4_11_LAYOUTS]
    standard = [r for r in rows if r.run.experiment == "ch4_uniform" and r.config == "standard"]
    if not layouts:
        raise LeanLMError(f"{name}: experiment ch4_layouts has no RndEmbQK or Non-apx. run with a Table 4.11 layout")
    scores = lm_eval_scores(tidy, profile, config, layouts + standard, name)
    metrics = _available(scores, FIGURE_4_3_METRICS)
    records = []
    for row in layouts:
        layout = canonical_layout(row.run.model.get("layout"))
        for column, _, _ in metrics:
            records.append({"variant": row.variant, "layout": layout, "run_id": row.run_id, "metric": column,
                            "value": scores.loc[row.run_id, column],
                            "standard": scores.loc[standard[0].run_id, column] if standard else math.nan})
    frame = pd.DataFrame(records)
    order = [layout for layout in TABLE_4_11_LAYOUTS if layout in set(frame["layout"])]
    base = paths.tables_dir(profile) / name
    csv = write_csv(frame, base.with_suffix(".csv"))
    with plt.rc_context({**STYLE, "figure.figsize": (2.2 * len(metrics), 3.4)}):
        fig, axes = plt.subplots(1, len(metrics), sharey=True, squeeze=False, constrained_layout=True)
        for ax, (column, label, log) in zip(axes[0], metrics):
            for i, variant in enumerate(LAYOUT_VARIANTS):
                part = frame[(frame["variant"] == variant) & (frame["metric"] == column)].set_index("layout")
                part = part.reindex([layout for layout in order if layout in part.index])
                y = [order.index(layout) + (i - 0.5) * 0.25 for layout in part.index]
                ax.scatter(part["value"], y, s=18, marker="os"[i], label=variant_label(variant))
            reference = frame.loc[frame["metric"] == column, "standard"].dropna()
            if not reference.empty:
                ax.axvline(reference.iloc[0], linestyle=":", color="black", linewidth=1, label="Standard")
            _xscale(ax, log)
            ax.set_xlabel(label)
        axes[0][0].set_yticks(range(len(order)))
        axes[0][0].set_yticklabels([PRINTED_LAYOUT.get(layout, layout) for layout in order])
        axes[0][0].invert_yaxis()
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncol=len(names), fontsize=7)
        return save_figure(fig, base) + [csv]


# ----------------------------------------------------------------------------- Figures 4.4, 4.5
def size_rows(config: dict, name: str) -> tuple[list[Ch4Row], list[str]]:
    """The ch4_sizes runs and their size labels, smallest model first."""
    rows = experiment_rows(config, ["ch4_sizes"], name, HEADS)
    ordered = sorted({size_label(r.run): size_order(r.run) for r in rows}.items(), key=lambda kv: kv[1])
    return rows, [label for label, _ in ordered]


def figure_4_4(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Every variant and configuration at each size on WikiText, ARC-E and SciQ (Figure 4.4)."""
    name = "figure_4_4"
    rows, sizes = size_rows(config, name)
    scores = lm_eval_scores(tidy, profile, config, rows, name)
    metrics = _available(scores, FIGURE_4_4_METRICS)
    records = [{"size": size_label(r.run), "config": r.config, "variant": r.variant, "label": r.label,
                "run_id": r.run_id, "metric": column, "value": scores.loc[r.run_id, column]}
               for r in rows for column, _, _ in metrics]
    frame = pd.DataFrame(records).sort_values("size", key=lambda c: c.map(sizes.index), kind="stable")
    models = [label for label in dict.fromkeys(r.label for r in rows if r.config != "standard")]
    shown = {size_label(r.run): size_shown(r.run) for r in rows}
    base = paths.tables_dir(profile) / name
    csv = write_csv(frame, base.with_suffix(".csv"))
    with plt.rc_context({**STYLE, "figure.figsize": (2.4 * len(metrics), 0.22 * len(models) + 1.6)}):
        fig, axes = plt.subplots(1, len(metrics), sharey=True, squeeze=False, constrained_layout=True)
        for ax, (column, label, log) in zip(axes[0], metrics):
            part = frame[frame["metric"] == column]
            for k, size in enumerate(sizes):
                mine = part[(part["size"] == size) & (part["config"] != "standard")]
                y = [models.index(m) for m in mine["label"]]
                ax.scatter(mine["value"], y, s=DOT_SIZES[min(k, len(DOT_SIZES) - 1)], alpha=0.7,
                           color=f"C{k}", label=shown[size])
                standard = part[(part["size"] == size) & (part["config"] == "standard")]["value"].dropna()
                if not standard.empty:
                    ax.axvline(standard.iloc[0], linestyle=":", color=f"C{k}", linewidth=1)
            _xscale(ax, log)
            ax.set_xlabel(label)
        axes[0][0].set_yticks(range(len(models)))
        axes[0][0].set_yticklabels(models, fontsize=6)
        axes[0][0].invert_yaxis()
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncol=len(names), fontsize=7,
                   title="model size (dotted lines: Standard of that size)", title_fontsize=7)
        return save_figure(fig, base) + [csv]


def _trained_model(config: dict, run) -> dict:
    """The model whose training a curve shows: the run's, or that of the run it evaluates (evaluate_from)."""
    from leanlm.runs import get_run

    return get_run(config, run.evaluate_from).model if run.evaluate_from else run.model


def figure_4_5(profile: str, config: dict, tidy: pd.DataFrame) -> list[Path]:
    """Training loss of every variant and configuration, one panel per size (Figure 4.5)."""
    from leanlm.modeling.mixers import CH4_VARIANTS

    name = "figure_4_5"
    rows, sizes = size_rows(config, name)
    # A point that evaluates another run's model (the 500M ones: ch4_uniform's) shows that run's training;
    # skip rows have no training of their own.
    trained = [r for r in rows if not r.run.skip_simple_layers]
    frames = [read_history(profile, r.run.evaluate_from or r.run_id).assign(
        size=size_label(r.run), run_id=r.run_id, label=r.label, config=r.config, variant=r.variant) for r in trained]
    frame = pd.concat(frames, ignore_index=True)
    base = paths.tables_dir(profile) / name
    csv = write_csv(frame, base.with_suffix(".csv"))
    styles = {"standard": "-", "uniform": "-", "hybrid": "--"}
    shown = {size_label(r.run): size_shown(r.run, _trained_model(config, r.run)) for r in trained}
    with plt.rc_context({**STYLE, "figure.figsize": (3.2 * len(sizes) + 1.6, 3.0)}):
        fig, axes = plt.subplots(1, len(sizes), squeeze=False, constrained_layout=True)
        for ax, size, letter in zip(axes[0], sizes, "abcdefgh"):
            for run_id, part in frame[frame["size"] == size].groupby("run_id", sort=False):
                config, variant = part["config"].iloc[0], part["variant"].iloc[0]
                color = "black" if config == "standard" else f"C{CH4_VARIANTS.index(variant) % 10}" \
                    if variant in CH4_VARIANTS else None
                ax.plot(part["step"], part["loss"], styles.get(config, ":"), color=color, linewidth=0.9,
                        label=part["label"].iloc[0])
            ax.set_title(f"({letter}) {shown.get(size, size)}", fontsize=8)
            ax.set_xlabel("step")
            ax.set_ylabel("training loss")
        # One legend beside the panels (13 curves: inside a panel it would cover them).
        handles, names = axes[0][-1].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside right upper", fontsize=6)
        return save_figure(fig, base) + [csv]
