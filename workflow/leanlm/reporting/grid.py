"""The generic grid table: one template (grid_table.tex.j2) for most thesis tables.

A grid is a label column and value columns, optionally under grouped headers ("GLUE" over Acc,
PRR, PEoP), one row per model, each followed by an italic "thesis" row with the numbers the thesis
prints. Builders describe the columns and rows; the template owns all the markup (booktabs rules,
cmidrules under groups, landscape pages via pdflscape, footnotes under the table).

    columns = [Column("#params", arrow="↓"), Column("Acc", group="GLUE", arrow="↑"), ...]
    rows = [grid_row("MHA", cells, reported=thesis_cells), ...]
    Table(frame, grid_context(caption="...", columns=columns, rows=rows, notes=notes))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from leanlm.reporting.latex import Cell

GRID_TEMPLATE = "grid_table.tex.j2"
MARKS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Column:
    """A value column: its header, the group header spanning it (consecutive equal groups merge),
    an arrow (↑ higher / ↓ lower is better) and its LaTeX alignment."""

    header: str
    group: str = ""
    arrow: str = ""
    align: str = "r"

    @property
    def title(self) -> str:
        return f"{self.header}{self.arrow}"


class Notes:
    """Footnotes of one table: a mark per distinct text, in order of first use (a, b, c, ...)."""

    def __init__(self) -> None:
        self._texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self._texts:
            self._texts.append(text)
        return MARKS[self._texts.index(text) % len(MARKS)]

    def marked(self, cell: Cell | str, text: str | None) -> Cell:
        """``cell`` with the mark of ``text`` (unchanged when ``text`` is None)."""
        cell = cell if isinstance(cell, Cell) else Cell(str(cell))
        if not text:
            return cell
        return Cell(cell.text, cell.bold, self.mark(text), cell.raw)

    def context(self) -> list[dict]:
        return [{"mark": MARKS[i % len(MARKS)], "text": t} for i, t in enumerate(self._texts)]


def grid_row(label: Cell | str, cells: Sequence[Cell | str], reported: Sequence[Cell | str] | None = None,
             rule_before: bool = False) -> dict:
    """One model's row; ``reported`` (the thesis's printed cells) becomes the italic row below it."""
    as_cell = lambda c: c if isinstance(c, Cell) else Cell(str(c))  # noqa: E731
    return {
        "label": as_cell(label),
        "cells": [as_cell(c) for c in cells],
        "reported": None if reported is None else [as_cell(c) for c in reported],
        "rule_before": rule_before,
    }


def header_groups(columns: Sequence[Column], first: int = 2) -> list[dict]:
    """Runs of consecutive columns with the same group: title, span and LaTeX column range.

    ``first`` is the LaTeX index of the first value column (the label column is 1).
    """
    groups: list[dict] = []
    for i, column in enumerate(columns):
        if groups and groups[-1]["title"] == column.group:
            groups[-1]["span"] += 1
            groups[-1]["last"] = first + i
        else:
            groups.append({"title": column.group, "span": 1, "first": first + i, "last": first + i})
    return groups


def grid_context(*, caption: str, columns: Sequence[Column], rows: Sequence[dict], label_header: str = "Attention",
                 notes: Notes | Sequence[dict] = (), landscape: bool = False, font: str = "footnotesize",
                 tabcolsep: str = "3pt", thesis_label: str = "thesis") -> dict:
    """The template context of a grid table (``template`` tells write_table which file to use).

    ``caption`` is plain text (escaped by the template). A row's cells must match ``columns``.
    """
    for row in rows:
        for what in ("cells", "reported"):
            if row[what] is not None and len(row[what]) != len(columns):
                raise ValueError(f"grid row {row['label'].text!r}: {len(row[what])} {what} for {len(columns)} columns")
    groups = header_groups(columns)
    return {
        "template": GRID_TEMPLATE,
        "caption": caption,
        "landscape": landscape,
        "font": font,
        "tabcolsep": tabcolsep,
        "align": "l" + "".join(c.align for c in columns),
        "label_header": label_header,
        "headers": [c.title for c in columns],
        "groups": groups if any(g["title"] for g in groups) else [],
        "rows": list(rows),
        "notes": notes.context() if isinstance(notes, Notes) else list(notes),
        "thesis_label": thesis_label,
    }
