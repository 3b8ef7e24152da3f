"""Tables 4.9 (pretraining hyperparameters) and 4.11 (the nine hybrid layouts), from what runs.

Table 4.9 is read from the profile: the causal-LM pretraining block with each chapter 4 model size's
``pretrain_overrides`` (one column per distinct setting), beside the thesis's column, plus the token
budget that DESIGN §8 makes govern the number of steps. Table 4.11 is read from
:mod:`leanlm.modeling.layouts` (the code that builds the models) at the thesis's 24 layers, and at the
depth of the profile's layout runs, beside the printed sets.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from leanlm.modeling.layouts import TABLE_4_11_LAYOUTS, standard_layers
from leanlm.reporting.ch4.records import canonical_layout, size_label, size_order
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
# The module, not its names: params_tables imports render, which imports this module (a cycle
# when params_tables is imported first); its names are looked up when the tables are built.
from leanlm.reporting import params_tables as pt
from leanlm.reporting.render import Table, fmt_count
from leanlm.reporting.reported import load_reported
from leanlm.runs import pretrain_settings, runs

THESIS_LAYERS = 24  # the 500M model of §4.6


def _tokens(s: dict) -> int:
    return s["batch_size"] * s.get("grad_accum", 1) * s["seq_len"]


PRETRAIN_ROWS_4_9: list[pt.Row] = [
    ("Maximum train steps", "Maximum train steps", "", "steps", lambda s, m: pt.fmt_value(s["steps"])),
    ("Batch size (in total)", "Batch size (in total)", "", "batch_size",
     lambda s, m: f"{s['batch_size'] * s.get('grad_accum', 1)} instances"),
    ("Adam ϵ", "Adam eps", r"Adam $\epsilon$", "adam_eps", lambda s, m: pt.fmt_value(s["adam_eps"])),
    ("Adam β_1", "Adam beta1", r"Adam $\beta_1$", "adam_betas", lambda s, m: pt.fmt_value(s["adam_betas"][0])),
    ("Adam β_2", "Adam beta2", r"Adam $\beta_2$", "adam_betas", lambda s, m: pt.fmt_value(s["adam_betas"][1])),
    ("Sequence length", "Sequence length", "", "seq_len", lambda s, m: pt.fmt_value(s["seq_len"])),
    ("Peak learning rate", "Peak learning rate", "", "lr", lambda s, m: pt.fmt_value(s["lr"])),
    ("Learning rate schedule", "Learning rate schedule", "", "schedule", lambda s, m: pt.fmt_value(s["schedule"])),
    # Our cosine schedule is half a cosine period from the peak to zero: the thesis's 0.5 cycles.
    ("Number of cycles in scheduler", "Number of cycles in scheduler", "", "schedule",
     lambda s, m: "0.5" if s["schedule"] == "cosine" else "-"),
    ("Warmup steps", "Warmup steps", "", "warmup_steps", lambda s, m: pt._warmup(s)),
    ("Weight decay", "Weight decay", "", "weight_decay", lambda s, m: pt.fmt_value(s["weight_decay"])),
    ("Max gradient norm clip value", "Max gradient norm clip value", "", "clip_norm",
     lambda s, m: pt.fmt_value(s.get("clip_norm"))),
    (None, "Tokens per step", "", "seq_len", lambda s, m: f"{_tokens(s):,}"),
    (None, "Training tokens", "", "steps", lambda s, m: fmt_count(_tokens(s) * s["steps"])),
]


def ch4_pretraining_columns(config: dict) -> list[tuple[str, str, dict, dict, str]]:
    """One column per distinct pretraining setting of the profile's qwen models, headed by their sizes
    (smallest first); the CSV names the blocks merged into it (``setting``)."""
    sizes: dict[str, tuple] = {}
    for run in sorted(runs(config), key=size_order):
        if run.backbone == "qwen" and run.size not in sizes:
            blocks = [f"pretrain.{run.objective}"] + ([f"pretrain_variants.{run.pretrain_variant}"]
                                                      if run.pretrain_variant else [])
            sizes[run.size] = (size_label(run), pretrain_settings(config, run), run.model, blocks)
    if not sizes:  # no chapter 4 experiment: the profile's qwen sizes, if any, with the causal-LM block
        for name, model in config.get("models", {}).items():
            if model.get("backbone", name) == "qwen" and "causal_lm" in config.get("pretrain", {}):
                settings = {**config["pretrain"]["causal_lm"], **model.get("pretrain_overrides", {})}
                sizes[name] = (name, settings, model, ["pretrain.causal_lm"])
    merged: dict[str, list] = {}
    for size, (label, settings, model, blocks) in sizes.items():
        if config["models"].get(size, {}).get("pretrain_overrides"):
            blocks = blocks + [f"models.{size}.pretrain_overrides"]
        key = repr(sorted(settings.items()))
        if key in merged:
            merged[key][1] += f", {label}"
        else:
            merged[key] = [size, label, settings, model, "(" + " < ".join(blocks) + ")"]
    return [tuple(v) for v in merged.values()]


def table_4_9(profile: str, config: dict) -> Table:
    """Chapter 4's pretraining hyperparameters as the profile sets them, beside the thesis's (Table 4.9)."""
    columns = ch4_pretraining_columns(config)
    absent = "" if columns else " This profile trains no chapter 4 model: only the thesis's column is shown."
    caption = (f"Hyperparameters used in pre-training the chapter 4 models (Table 4.9), as the {profile} profile "
               f"sets them (params file {Path(config['_params_file']).name}; one column per model size with its "
               "own settings), beside the thesis's. DESIGN §8: the token budget (15B tokens at 0.5M per step, about "
               f"28.6K steps) governs over the printed 120K steps. A '-' marks a setting the thesis does not "
               f"print.{absent}")
    return pt.hyperparameter_table(profile, config, table="table_4_9", rows=PRETRAIN_ROWS_4_9, columns=columns,
                                caption=caption, thesis_align="p{4.2cm}", value_align="l")


# ----------------------------------------------------------------------------- Table 4.11
PRINTED_LAYOUT = {"even": "even (50%)"}


def fmt_layers(layers) -> str:
    return "{" + ",".join(str(i) for i in sorted(layers)) + "}"


def profile_layout_depths(config: dict) -> list[int]:
    """Depths of the profile's hybrid-layout runs (ch4_layouts), where they differ from the thesis's 24."""
    depths = {int(r.model["n_layers"]) for r in runs(config)
              if r.experiment == "ch4_layouts" and canonical_layout(r.model.get("layout")) in TABLE_4_11_LAYOUTS}
    return sorted(depths - {THESIS_LAYERS})


def table_4_11(profile: str, config: dict) -> Table:
    """The nine hybrid layouts (Table 4.11): the layers that keep standard attention, from layouts.py."""
    reported = load_reported("table_4_11")
    depths = profile_layout_depths(config)
    notes = Notes()
    records, grid = [], []
    for layout in TABLE_4_11_LAYOUTS:
        printed_label = PRINTED_LAYOUT.get(layout, layout)
        ours = fmt_layers(standard_layers(layout, THESIS_LAYERS))
        printed = str(reported.loc[printed_label, "standard_layer_ids"]) if printed_label in reported.index else "-"
        note = (None if printed in ("-", ours)
                else f"{printed_label}: layouts.py keeps {ours}, the thesis prints {printed}")
        extra = [fmt_layers(standard_layers(layout, n)) for n in depths]
        grid.append(grid_row(Cell(printed_label), [notes.marked(Cell(ours), note), *map(Cell, extra), Cell(printed)]))
        records.append({"layout": layout, "printed_label": printed_label, "standard_layer_ids": ours,
                        **{f"standard_layer_ids_{n}": e for n, e in zip(depths, extra)},
                        "reported_standard_layer_ids": printed, "matches": printed == ours})
    columns = [Column(f"{THESIS_LAYERS} layers", "Standard layer IDs", align="l")]
    columns += [Column(f"{n} layers ({profile})", "Standard layer IDs", align="l") for n in depths]
    columns.append(Column("Table 4.11", "Thesis", align="l"))
    caption = ("Details of model configurations for the ablation study (Table 4.11): the layers (1-based) that "
               "keep standard attention in each hybrid layout, every other layer using the simpler attention, "
               "as leanlm.modeling.layouts builds them for the thesis's 24-layer model"
               + (f" and for the {profile} profile's layout runs" if depths else "")
               + ". DESIGN §8: the table's sets govern where §4.6's prose differs ('bottom' keeps layers 13-24).")
    context = grid_context(caption=caption, columns=columns, rows=grid, notes=notes, label_header="Config",
                           font="small")
    context["profile"] = profile
    return Table(frame=pd.DataFrame(records), context=context)
