"""Table 2.2's parameter columns at the thesis's scale (analytic item ``table_2_2_parameters``).

#Total, #Emb, PCR (All), PCR (Emb) and PoEP of every Table 2.2 model at BERT-base, counted by
:mod:`leanlm.reporting.ch2.counts` from models built on the meta device (HashFormers, BERT-MLM,
ProFormer) or by Appendix 2.8's formulas (CANINE-C: 16,000 buckets x d; ProFormer's #Emb: 420 bits x
d), each row above the thesis's printed values. No training, whatever the profile: ``snakemake
analytic`` writes it in seconds. The counts hold exactly; the two cells where the thesis's own
numbers cannot be reproduced are footnoted, not hidden.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from leanlm.errors import LeanLMError
from leanlm.reporting.ch2.counts import table_2_2_parameter_rows
from leanlm.reporting.grid import Column, Notes, grid_context, grid_row
from leanlm.reporting.latex import Cell
from leanlm.reporting.render import Table, fmt_number, is_missing, write_table
from leanlm.reporting.reported import load_reported

UP, DOWN = "↑", "↓"
NAME = "table_2_2_parameters"
METRICS = [("pcr_all", "PCR (All)", UP), ("pcr_emb", "PCR (Emb)", UP), ("poep", "PoEP", DOWN)]
PRINTED = {"total": "total_params", "emb": "emb_params", "pcr_all": "pcr_all", "pcr_emb": "pcr_emb",
           "poep": "poep"}

SOURCE_NOTES = {
    "CANINE-C": ("CANINE-C: #Emb = 16,000 hash buckets x 768 (Eq. 2.10); #Total is the thesis's 121.0M, which "
                 "cannot be derived here (transformers' CanineForSequenceClassification with google/canine-c's "
                 "config has 132.1M)."),
    "ProFormer": ("ProFormer: #Emb = 420 LSH bits x 768 (Eq. 2.11); #Total counts the model as trained: two "
                  "BERT-base layers, the projection, pooler and classifier, with fixed sinusoidal positions "
                  "and no token-type table."),
    "BERT-MLM": ("BERT-MLM (RoBERTa-base, 50,265 BPE entries): the baseline of PCR; the thesis prints its counts "
                 "in the text (124.6M / 38.6M), not as a row."),
}
PCR_NOTE = ("The thesis computes PCR and PoEP from its printed (rounded) counts, and so does this table: only that "
            "way does CANINE-C's PCR (Emb) come out at 68.1 (68.2 from the exact ratio).")


def table_2_2_parameters_frame() -> pd.DataFrame:
    """The counted rows beside the printed ones (columns reported_<metric>; empty where not printed)."""
    frame = table_2_2_parameter_rows()
    try:
        reported = load_reported("table_2_2")
    except LeanLMError:
        reported = None
    keys = [f"{g}-{m}" if g.startswith("HashFormers") else m for g, m in zip(frame["group"], frame["model"])]
    frame.insert(2, "label", keys)
    for ours, column in PRINTED.items():
        frame[f"reported_{ours}"] = [
            reported.loc[k, column] if reported is not None and k in reported.index else None for k in keys
        ]
    return frame


def _mismatch_note(row: pd.Series, metric: str, header: str) -> str | None:
    """A footnote where the printed value is not what the counts give (PoEP of Emb (1K) and Pool)."""
    printed = row[f"reported_{metric}"]
    if is_missing(printed):
        return None
    if fmt_number(row[metric], 1) == fmt_number(printed, 1):
        return None
    text = f"{header}: the thesis prints {float(printed):.1f}, the counts give {fmt_number(row[metric], 1)}"
    if metric == "poep":
        exact = 100 * float(row["emb"]) / float(row["total"])
        text += f" ({row['emb_printed']} / {row['total_printed']} = {exact:.2f}%)"
    return text + "."


def table_2_2_parameters(profile: str) -> list[Path]:
    """Table 2.2's #Total, #Emb, PCR (All), PCR (Emb), PoEP at BERT-base, beside the printed values."""
    frame = table_2_2_parameters_frame()
    notes = Notes()
    columns = [Column("#Total Params", arrow=DOWN), Column("#Emb Params", arrow=DOWN)]
    columns += [Column(header, arrow=arrow) for _, header, arrow in METRICS]
    rows, group = [], None
    for _, row in frame.iterrows():
        if row["group"] != group and row["group"].startswith("HashFormers"):
            rows.append(grid_row(Cell(f"{row['group']} (Ours)"), [""] * len(columns), rule_before=True))
        group = row["group"]
        cells = [Cell(row["total_printed"]), Cell(row["emb_printed"])]
        cells += [notes.marked(Cell(fmt_number(row[m], 1)), _mismatch_note(row, m, header)) for m, header, _ in METRICS]
        printed = None
        if not is_missing(row["reported_total"]):
            printed = [Cell(str(row["reported_total"])), Cell(str(row["reported_emb"]))]
            printed += [Cell(fmt_number(row[f"reported_{m}"], 1)) for m, _, _ in METRICS]
        label = notes.marked(Cell(row["model"]), SOURCE_NOTES.get(row["model"]))
        rows.append(grid_row(label, cells, printed))
    caption = (
        "Table 2.2's parameter columns at the thesis's scale (BERT-base: 12 layers, d=768, binary classification "
        "head), counted from the models (Appendix 2.8), each row above the thesis's printed row. #Emb excludes "
        "special tokens and positions; PCR against BERT-MLM and PoEP in %. MD5 and LSH rows count alike: hashing "
        f"has no parameters. {PCR_NOTE}"
    )
    context = grid_context(caption=caption, columns=columns, rows=rows, notes=notes, label_header="Emb.",
                           font="small")
    context["profile"] = profile
    return write_table(profile, NAME, Table(frame=frame, context=context))
