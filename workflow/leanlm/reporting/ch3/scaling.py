"""Chapter 3's robustness-to-scaling tables (Appendix 3.11): MHA against MHE-MUL across model sizes.

- Table 3.14: encoder-only BASE/LARGE and decoder-only BASE/MEDIUM on GLUE, SUPERGLUE (averages),
  WIKITEXT-103 and PENN TREEBANK (perplexity, lower is better: inverse PRR), with PRR of MHE-MUL.
  BASE rows come from ch3_encoder / ch3_decoder, the larger ones from ch3_encoder_large /
  ch3_decoder_medium.
- Table 3.15: the seven encoder-decoder configurations on WMT-14 (BASE from ch3_encdec, the others
  from ch3_encdec_sizes, whose runs are named <configuration>_mha / <configuration>_mhe_mul).

Scores are the mean over seeds (the thesis prints no std here; the CSV has it). #params are the
attention weights of each run's model; the printed ones are checked against the thesis-scale count.
"""

from __future__ import annotations

import pandas as pd

from leanlm.reporting import derived
from leanlm.reporting.ch3.results import (Block, averaged_epochs, block_summary, lm_protocol, printed,
                                          printed_params_cells, require_named_runs)
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.reported import load_reported
from leanlm.reporting.render import Table, experiment_runs, fmt_count, fmt_number, scale_note
from leanlm.runs import Run, pretrain_settings

PAIR = ("mha", "mhe_mul")

# Table 3.14: printed row label -> experiment; benchmark blocks with their reported column prefixes.
TABLE_3_14_ROWS = [
    ("Encoder-only BASE", "ch3_encoder"),
    ("Encoder-only LARGE", "ch3_encoder_large"),
    ("Decoder-only BASE", "ch3_decoder"),
    ("Decoder-only MEDIUM", "ch3_decoder_medium"),
]
TABLE_3_14_BLOCKS = [
    Block("glue", "GLUE", "glue", None, "", "glue", ""),
    Block("superglue", "SUPERGLUE", "superglue", None, "", "superglue", ""),
    Block("wikitext103", "WIKITEXT-103", "lm", ("wikitext103",), "", "wikitext103", ""),
    Block("ptb", "PENN TREEBANK", "lm", ("ptb",), "", "penn_treebank", ""),
]

# Table 3.15: printed row label, experiment, run-name prefix of the configuration.
TABLE_3_15_ROWS = [
    ("BASE", "ch3_encdec", ""),
    ("BASE (d_h=32)", "ch3_encdec_sizes", "h16_"),
    ("BASE (d_h=128)", "ch3_encdec_sizes", "h4_"),
    ("4L", "ch3_encdec_sizes", "l4_"),
    ("8L", "ch3_encdec_sizes", "l8_"),
    ("12H", "ch3_encdec_sizes", "h12_"),
    ("BIG", "ch3_encdec_sizes", "big_"),
]
WMT14 = Block("wmt14", "WMT-14", "translation", ("wmt14",), "BLEU", "", "bleu")


def _pair_summary(tidy, profile, config, table, runs: list[Run], block: Block) -> dict:
    """MHA's and MHE-MUL's mean and std on ``block``, MHE-MUL's PRR, and both attention counts."""
    summary, inverse = block_summary(tidy, profile, config, table, runs, block)
    mean, std = summary["mean"].to_numpy(), summary["std"].to_numpy()
    return {"mha": mean[0], "mhe_mul": mean[1], "mha_std": std[0], "mhe_mul_std": std[1],
            "prr": derived.prr(mean[1], mean[0], inverse=inverse), "inverse": inverse,
            "params": summary["params_attention"].to_numpy()}


def fmt_steps(steps: int) -> str:
    """Training steps as the thesis prints them: 100000 -> 100K."""
    return f"{steps // 1000}K" if steps >= 1000 and steps % 1000 == 0 else str(steps)


def table_3_14(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """MHA vs MHE-MUL across encoder and decoder sizes with PRR (Table 3.14)."""
    table = "table_3_14"
    reported = load_reported(table)
    notes = Notes()
    records, rows = [], []
    directions: dict[str, bool] = {}
    for label, experiment in TABLE_3_14_ROWS:
        runs = require_named_runs(experiment_runs(config, experiment, table), PAIR, table, experiment)
        record = {"row": label, "experiment": experiment}
        cells: list[Cell] = []
        rep = reported.loc[label] if label in reported.index else None
        thesis: list[Cell] = []
        params = None
        for block in TABLE_3_14_BLOCKS:
            if block.available(config, experiment):
                pair = _pair_summary(tidy, profile, config, table, runs, block)
                directions[block.key] = pair["inverse"]
                params = pair["params"]
                for key in ("mha", "mhe_mul", "mha_std", "mhe_mul_std", "prr"):
                    record[f"{block.key}_{key}"] = pair[key]
                cells += [Cell(fmt_number(pair["mha"], 1)), Cell(fmt_number(pair["mhe_mul"], 1)),
                          Cell(fmt_number(pair["prr"], 1))]
            else:
                cells += [Cell("-")] * 3
            for key in ("mha", "mhe_mul", "prr"):
                value = printed([rep], f"{block.reported}_{key}")[0]
                record[f"reported_{block.key}_{key}"] = value
                thesis.append(Cell(fmt_number(value, 1)))
        if params is None:  # every experiment here is evaluated on some block (the matrix says so)
            raise AssertionError(f"{experiment} has no Table 3.14 benchmark")
        record["params_mha"], record["params_mhe_mul"] = int(params[0]), int(params[1])
        printed_params = [printed([rep], f"params_{a}")[0] for a in PAIR]
        record["reported_params_mha"], record["reported_params_mhe_mul"] = printed_params
        params_cells = [Cell(fmt_count(p)) for p in params]
        printed_cells = printed_params_cells(printed_params, runs, notes,
                                             [Cell(p if isinstance(p, str) else "-") for p in printed_params])
        rows.append(grid_row(label, params_cells + cells, None if rep is None else printed_cells + thesis,
                             rule_before=label.startswith("Decoder") and label.endswith("BASE")))
        records.append(record)
    columns = [Column("MHA", "#Params↓"), Column("MHE-MUL", "#Params↓")]
    for block in TABLE_3_14_BLOCKS:
        group = block.title + ("↓" if directions.get(block.key) else "↑")
        columns += [Column("MHA", group), Column("MHE-MUL", group), Column("PRR", group, "↑")]
    caption = (
        "MHA and MHE-MUL across model sizes (Table 3.14): GLUE and SUPERGLUE averages (x 100), WIKITEXT-103 "
        f"and PENN TREEBANK perplexity ({lm_protocol(config)}), and the performance retention ratio (PRR, %) of MHE-MUL against MHA "
        "(the inverse form for perplexity); means over seeds (stds in the CSV), each row above the thesis's "
        f"printed row. {scale_note(config, 'bert')}. #Params counts the attention weights of each model. "
        "BASE rows are the models of Tables 3.1 and 3.2; LARGE/MEDIUM double the layers and widen the model. "
        "As printed, the thesis's LARGE GLUE scores (81.5, 82.6) are those of Table 3.5's MHE-MUL (M) and MHA(M), "
        "swapped."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, label_header="Model",
                           landscape=True)
    context["profile"] = profile
    return Table(frame=pd.DataFrame(records), context=context)


def _configurations(config: dict, table: str) -> list[tuple[str, str, list[Run]]]:
    """(printed label, display label, [MHA run, MHE-MUL run]) per configuration, the thesis's order first."""
    out = []
    known = set()
    for label, experiment, prefix in TABLE_3_15_ROWS:
        runs = require_named_runs(experiment_runs(config, experiment, table), tuple(prefix + a for a in PAIR),
                                  table, experiment)
        known |= {r.run_id for r in runs}
        shown = f"BASE (d_h={runs[0].model['head_dim']})" if label.startswith("BASE (d_h=") else label
        out.append((label, shown, runs))
    # Configurations the matrix adds beyond the thesis's seven come last, named by their prefix.
    extra = [r for r in experiment_runs(config, "ch3_encdec_sizes", table) if r.run_id not in known]
    prefixes = sorted({r.name[: -len(r.attention)] for r in extra if r.name.endswith(r.attention)})
    for prefix in prefixes:
        runs = require_named_runs(extra, tuple(prefix + a for a in PAIR), table, "ch3_encdec_sizes")
        out.append(("", prefix.rstrip("_"), runs))
    return out


def table_3_15(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-decoder BLEU of MHA vs MHE-MUL across seven configurations (Table 3.15)."""
    table = "table_3_15"
    reported = load_reported(table)
    notes = Notes()
    records, rows = [], []
    for label, shown, runs in _configurations(config, table):
        pair = _pair_summary(tidy, profile, config, table, runs, WMT14)
        model = runs[0].model
        steps = pretrain_settings(config, runs[0])["steps"]
        sizes = [model["n_layers"] + model.get("n_decoder_layers", 0), model["d_model"], model["n_heads"],
                 model["head_dim"], model["dropout"]]
        record = {"row": shown, "thesis_row": label, "run_mha": runs[0].run_id, "run_mhe_mul": runs[1].run_id,
                  **dict(zip(["n_layers", "d_m", "h", "d_h", "p_drop"], sizes)), "steps": steps,
                  "params_mha": int(pair["params"][0]), "params_mhe_mul": int(pair["params"][1]),
                  "bleu_mha": pair["mha"], "bleu_mhe_mul": pair["mhe_mul"], "prr": pair["prr"]}
        cells = [Cell(str(v)) for v in sizes] + [Cell(fmt_steps(steps)), Cell(fmt_count(pair["params"][0])),
                                                 Cell(fmt_count(pair["params"][1])), Cell(fmt_number(pair["mha"], 1)),
                                                 Cell(fmt_number(pair["mhe_mul"], 1)), Cell(fmt_number(pair["prr"], 1))]
        rep = reported.loc[label] if label in reported.index else None
        thesis = None
        if rep is not None:
            for column in ("n_layers", "d_m", "h", "d_h", "p_drop", "steps", "params_mha", "params_mhe_mul",
                           "bleu_mha", "bleu_mhe_mul", "prr"):
                record[f"reported_{column}"] = rep[column]
            printed_params = printed_params_cells(
                [rep["params_mha"], rep["params_mhe_mul"]], runs, notes,
                [Cell(rep["params_mha"]), Cell(rep["params_mhe_mul"])])
            thesis = ([Cell(str(rep[c])) for c in ("n_layers", "d_m", "h", "d_h", "p_drop", "steps")] + printed_params
                      + [Cell(fmt_number(rep[c], 1)) for c in ("bleu_mha", "bleu_mhe_mul", "prr")])
        rows.append(grid_row(shown, cells, thesis))
        records.append(record)
    columns = ([Column(h) for h in ("N", "d_m", "h", "d_h", "p_drop", "#Steps")]
               + [Column("MHA", "#Params↓"), Column("MHE-MUL", "#Params↓"), Column("MHA", "BLEU↑"),
                  Column("MHE-MUL", "BLEU↑"), Column("PRR", arrow="↑")])
    caption = (
        "MHA and MHE-MUL encoder-decoders on WMT-14 English to German across model sizes (Table 3.15): test "
        f"BLEU (one seed; the mean over the checkpoints of the last {averaged_epochs(config)} epoch(s)) and the "
        "performance retention ratio (PRR, %) of MHE-MUL against MHA, each row above the "
        f"thesis's printed row. N: encoder + decoder layers; d_m: model width; h heads of d_h; p_drop: dropout; "
        f"#Steps: training steps. {scale_note(config, 'transformer')}. #Params counts the attention weights "
        "(self- and cross-attention) of each model."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, label_header="Configuration",
                           landscape=True)
    context["profile"] = profile
    return Table(frame=pd.DataFrame(records), context=context)
