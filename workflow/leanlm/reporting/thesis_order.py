"""Where each output of paper_tables/<profile>/ stands in the thesis: its chapter, its place and its number.

tables.pdf follows the thesis: chapter by chapter, tables and figures in the order the thesis prints their
captions, each numbered as the thesis numbers it ("Table 3.10", not LaTeX's running count). An output the
thesis does not print (a side-by-side table, the parameter counts behind a figure) goes at the end of its
chapter, lettered "2.A", "2.B", ... in name order; its chapter is read from its name (``table_2_...``,
``ch3_...``) or from its renderer's chapter package in params/tables.yaml (``leanlm.reporting.ch3``), and
an output of no chapter goes to a last section.

:data:`THESIS_ORDER` is the thesis's own caption order (tests/test_tables_pdf.py checks it against the
thesis text); the diagrams the pipeline does not draw (Figures 2.1-2.5, 3.2) are listed too, so the list is
the thesis's and not the pipeline's.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

# Every table and figure caption of chapters 2-4, in the order the thesis prints them.
THESIS_ORDER: tuple[str, ...] = (
    "figure_2_1", "figure_2_2", "figure_2_3", "figure_2_4", "figure_2_5",
    "table_2_1", "table_2_2", "table_2_3", "table_2_4", "table_2_5", "table_2_6",
    "figure_3_1", "figure_3_2", "table_3_1", "table_3_2", "table_3_3", "table_3_4", "figure_3_3", "figure_3_4",
    "table_3_5", "table_3_6", "table_3_7", "table_3_8", "table_3_9", "table_3_10", "table_3_11", "table_3_12",
    "table_3_13", "table_3_14", "table_3_15",
    "table_4_1", "figure_4_1", "figure_4_2", "figure_4_3", "figure_4_4", "table_4_2", "table_4_3", "table_4_4",
    "table_4_5", "table_4_6", "table_4_7", "table_4_8", "table_4_9", "figure_4_5", "table_4_10", "figure_4_6",
    "figure_4_7", "figure_4_8", "table_4_11",
)

CHAPTER_TITLES = {
    2: "HashFormers: vocabulary-independent pre-trained transformers",
    3: "Multi-head embedding attention (MHE)",
    4: "Deconstructing attention: design principles of token mixers",
}
OTHER = 0  # the section of outputs that belong to no chapter

_THESIS_NAME = re.compile(r"^(table|figure)_(\d+)_(\d+)$")
_CHAPTER_IN_NAME = re.compile(r"^(?:(?:table|figure)_|ch)(\d+)_")
_CHAPTER_PACKAGE = re.compile(r"^leanlm\.reporting\.ch(\d+)\.")


@dataclass(frozen=True)
class Placed:
    """One output of tables.pdf: its file stem, kind, chapter and the number its caption carries."""

    name: str
    kind: str       # "table" | "figure"
    chapter: int    # OTHER for none
    number: str     # "3.10" (the thesis's), "2.A" (an output the thesis does not print), "A" (no chapter)
    in_thesis: bool


def chapter_of(name: str, renderers: dict[str, str] | None = None) -> int:
    """The chapter of output ``name``: from its name, else from its renderer's package, else OTHER."""
    found = _CHAPTER_IN_NAME.match(name)
    if found:
        return int(found.group(1))
    found = _CHAPTER_PACKAGE.match((renderers or {}).get(name, ""))
    return int(found.group(1)) if found else OTHER


def place(tables: list[str], figures: list[str], renderers: dict[str, str] | None = None) -> list[Placed]:
    """``tables`` and ``figures`` (file stems) in the thesis's order, numbered as the thesis numbers them."""
    kinds = {**{t: "table" for t in tables}, **{f: "figure" for f in figures}}
    position = {name: i for i, name in enumerate(THESIS_ORDER)}
    placed = []
    for name in sorted(n for n in kinds if n in position):
        match = _THESIS_NAME.match(name)
        placed.append(Placed(name, kinds[name], int(match.group(2)), f"{match.group(2)}.{match.group(3)}", True))
    placed.sort(key=lambda p: position[p.name])
    extras: dict[int, list[str]] = {}
    for name in sorted(n for n in kinds if n not in position):
        extras.setdefault(chapter_of(name, renderers), []).append(name)
    ordered = []
    for chapter in sorted(set(CHAPTER_TITLES) | {p.chapter for p in placed} | set(extras), key=lambda c: c or 99):
        ordered += [p for p in placed if p.chapter == chapter]
        for letter, name in zip(_letters(), extras.get(chapter, [])):
            ordered.append(Placed(name, kinds[name], chapter, f"{chapter}.{letter}" if chapter else letter, False))
    return ordered


def _letters():
    """A, B, ..., Z, AA, AB, ...: as many labels as a chapter has outputs the thesis does not print."""
    for width in range(1, 4):
        for i in range(len(string.ascii_uppercase) ** width):
            label, n = "", i
            for _ in range(width):
                n, r = divmod(n, 26)
                label = string.ascii_uppercase[r] + label
            yield label
