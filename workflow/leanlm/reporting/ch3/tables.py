"""Chapter 3's efficiency tables (Tables 3.1-3.3): #params, then score, PRR and PEoP per benchmark.

Every model is one row of reproduced numbers followed by the thesis's printed row. #params are the
attention weights of the run's own model (its results JSON); the printed #params are checked
against the same models built at the thesis's scale (ch3.counts) and footnoted where the thesis
rounds differently (MHA at BERT-base: printed 28.32M, counted 28,311,552).
"""

from __future__ import annotations

import pandas as pd

from leanlm.errors import LeanLMError
from leanlm.reporting.ch3.results import averaged_epochs, lm_protocol
from leanlm.reporting.ch3.results import (
    Block,
    block_summary,
    is_extra,
    label_cell,
    printed,
    printed_params_cells,
    seeds_phrase,
    thesis_rows,
)
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.reported import load_reported, parse_count
from leanlm.reporting.render import (
    Table,
    column_cells,
    experiment_runs,
    run_label,
    fmt_count,
    fmt_mean_std,
    fmt_number,
    scale_note,
)

UP, DOWN = "↑", "↓"

TABLE_3_1_BLOCKS = [
    Block("glue", "GLUE", "glue", None, "Acc", "glue", "acc"),
    Block("superglue", "SUPERGLUE", "superglue", None, "Acc", "superglue", "acc"),
    Block("squad_v1", "SQUAD v1.1", "squad", ("squad_v1",), "F1", "squad_v1", "acc"),
    Block("squad_v2", "SQUAD v2.0", "squad", ("squad_v2",), "F1", "squad_v2", "acc"),
]
TABLE_3_2_BLOCKS = [
    Block("glue", "GLUE", "glue", None, "Acc", "glue", "acc"),
    Block("wikitext103", "WIKITEXT-103", "lm", ("wikitext103",), "PPL", "wikitext103", "ppl"),
    Block("ptb", "PENN TREEBANK", "lm", ("ptb",), "PPL", "penn_treebank", "ppl"),
]
TABLE_3_3_BLOCKS = [Block("wmt14", "WMT-14 En-De", "translation", ("wmt14",), "BLEU", "", "bleu")]


def efficiency_table(profile: str, config: dict, tidy: pd.DataFrame, *, table: str, experiment: str,
                     blocks: list[Block], what: str, peop_digits: int = 2, landscape: bool = False) -> Table:
    """The #params | score PRR PEoP | ... grid of ``experiment``'s runs, each above the thesis's row."""
    selected = experiment_runs(config, experiment, table)
    blocks = [b for b in blocks if b.available(config, experiment)]
    if not blocks:
        raise LeanLMError(f"{table}: experiment {experiment} is evaluated on none of its benchmarks in this profile")
    reported = load_reported(table)
    rep_rows = thesis_rows(reported, selected)
    notes = Notes()
    run_ids = [r.run_id for r in selected]
    mha = [i for i, r in enumerate(selected) if r.name == "mha"]     # PRR's reference does not compete
    sha = [i for i, r in enumerate(selected) if r.name == "sha"]     # nor does PEoP's
    extras = [i for i, r in enumerate(selected) if is_extra(r)]      # token mixers: no PEoP, no PRR race

    summaries = {b.key: block_summary(tidy, profile, config, table, selected, b) for b in blocks}
    params = summaries[blocks[0].key][0]["params_attention"].to_numpy()
    printed_params = ["-" if row is None else row["params"] for row in rep_rows]
    frame = pd.DataFrame({
        "attention": [run_label(r) for r in selected], "run_id": run_ids,
        "n_seeds": summaries[blocks[0].key][0]["n_seeds"].to_numpy(), "params_attention": params,
        "reported_params": ["" if p == "-" else p for p in printed_params],
    })
    columns = [Column("#params", arrow=DOWN)]
    ours = [column_cells([fmt_count(p) for p in params], params, False, 0, exclude=extras)]
    thesis = [printed_params_cells(
        printed_params, selected, notes,
        column_cells(printed_params, [parse_count(p) for p in printed_params], False, 2))]
    for block in blocks:
        s, inverse = summaries[block.key]
        mean, std, prr_, peop_ = (s[c].to_numpy() for c in ("mean", "std", "prr", "peop"))
        frame[f"{block.key}_mean"], frame[f"{block.key}_std"] = mean, std
        frame[f"{block.key}_prr"], frame[f"{block.key}_peop"] = prr_, peop_
        columns += [Column(block.metric, block.title, DOWN if inverse else UP),
                    Column("PRR", block.title, UP), Column("PEoP", block.title, UP)]
        ours += [
            column_cells([fmt_mean_std(m, sd) for m, sd in zip(mean, std)], mean, not inverse, 1),
            column_cells([fmt_number(v, 1) for v in prr_], prr_, True, 1, exclude=mha + extras),
            column_cells([fmt_number(v, peop_digits) for v in peop_], peop_, True, peop_digits, exclude=sha + extras),
        ]
        for metric, digits, higher, exclude in (("score", 1, not inverse, ()), ("prr", 1, True, mha),
                                                ("peop", peop_digits, True, sha)):
            values = printed(rep_rows, block.reported_column(metric))
            frame[f"reported_{block.key}_{'mean' if metric == 'score' else metric}"] = values
            thesis.append(column_cells([fmt_number(v, digits) for v in values], values, higher, digits, exclude))

    rows = [grid_row(label_cell(run, notes), [c[i] for c in ours],
                     None if rep_rows[i] is None else [c[i] for c in thesis])
            for i, run in enumerate(selected)]
    seeded = any(s[0]["n_seeds"].max() > 1 for s in summaries.values())
    inverse_note = (" PPL is lower-is-better: its PRR and PEoP take the inverse forms of §3.4.6."
                    if any(s[1] for s in summaries.values()) else "")
    caption = (
        f"{what} ({table.replace('table_', 'Table ').replace('_', '.')}): score, performance retention ratio "
        f"(PRR, %) against MHA and performance elasticity of parameters (PEoP) against SHA; reproduced values "
        f"are the {seeds_phrase(config, seeded)}, each row above the thesis's printed row. "
        f"{scale_note(config, config['_matrix'][experiment]['backbone'])}. #params counts the attention weights "
        f"of each model without biases.{inverse_note} "
        f"Bold: best per column (↑/↓: higher/lower is better; PRR leaves out the MHA reference, PEoP the SHA "
        f"reference)."
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, landscape=landscape,
                           font="footnotesize" if landscape else "small")
    context["profile"] = profile
    return Table(frame=frame, context=context)


def table_3_1(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-only results on GLUE, SUPERGLUE, SQUAD v1.1 and v2.0 with PRR and PEoP (Table 3.1)."""
    return efficiency_table(profile, config, tidy, table="table_3_1", experiment="ch3_encoder",
                            blocks=TABLE_3_1_BLOCKS, what="Encoder-only architecture on dev sets", landscape=True)


def table_3_2(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Decoder-only results: GLUE dev, WIKITEXT-103 and PENN TREEBANK test perplexity (Table 3.2)."""
    return efficiency_table(profile, config, tidy, table="table_3_2", experiment="ch3_decoder",
                            blocks=TABLE_3_2_BLOCKS, what="Decoder-only architecture on GLUE dev sets and "
                            f"language modelling test sets ({lm_protocol(config)})", landscape=True)


def table_3_3(profile: str, config: dict, tidy: pd.DataFrame) -> Table:
    """Encoder-decoder BLEU on WMT-14 English-German with PRR and PEoP (Table 3.3; PEoP to one decimal)."""
    return efficiency_table(profile, config, tidy, table="table_3_3", experiment="ch3_encdec",
                            blocks=TABLE_3_3_BLOCKS, what=f"Encoder-decoder on WMT-14 English to German (test BLEU, one seed, "
                            f"averaged over the checkpoints of the last {averaged_epochs(config)} epoch(s))",
                            peop_digits=1)
