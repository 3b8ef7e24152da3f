"""The tables and figures of report.html (leanlm.reporting.report_page): in the thesis's order and numbering,
each table's CSV as HTML with the thesis's numbers beside the reproduced ones, each run linked to its results
and logs, each figure embedded from its PNG.

Every link is relative to the report's folder (paper_tables/<profile>/), so the page opens from disk, and
names only files that exist.
"""

from __future__ import annotations

import base64
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from leanlm import paths
from leanlm.reporting.figures import FIGURE_CAPTIONS
from leanlm.reporting.thesis_order import CHAPTER_TITLES, place

REPORTED = "reported_"   # the thesis's number of column X is column reported_X (leanlm.reporting.reported)
MAX_ROWS = 200           # a table longer than this shows its first rows and links the whole CSV
NOT_OUTPUTS = {"claims", "tables", "report"}  # files of the folder that are not thesis tables or figures


def href(target: Path, base: Path) -> str:
    """``target`` as a URL relative to folder ``base``."""
    return quote(Path(os.path.relpath(target, base)).as_posix())


def run_column(column: str) -> bool:
    """Columns naming a run: ``run_id``, or ``run_<variant>`` where a table compares runs side by side."""
    return column == "run_id" or column.startswith("run_")


def run_files(profile: str, run_id: str) -> list[tuple[str, Path]]:
    """(label, path) of what one run left: its results JSONs (results/<profile>/runs/<run>/, leanlm.paths)
    and the logs of its jobs (the rules' ``log:``: logs/<profile>/pretrain/<run>.log and
    logs/<profile>/finetune/<run>/<family>.log); only files that exist."""
    root = paths.project_root()
    found = [(p.name, p) for p in sorted((paths.results_dir(profile) / "runs" / run_id).glob("*.json"))]
    pretrain_log = root / "logs" / profile / "pretrain" / f"{run_id}.log"
    if pretrain_log.is_file():
        found.append(("pretrain log", pretrain_log))
    found += [(f"{p.stem} log", p) for p in sorted((root / "logs" / profile / "finetune" / run_id).glob("*.log"))]
    return found


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def _columns(frame: pd.DataFrame) -> list[str]:
    """The CSV's columns with each thesis column right after the column it reports."""
    reported = {c for c in frame.columns if c.startswith(REPORTED) and c[len(REPORTED):] in frame.columns}
    order = []
    for column in frame.columns:
        if column in reported:
            continue
        order.append(column)
        if REPORTED + column in reported:
            order.append(REPORTED + column)
    return order + [c for c in frame.columns if c.startswith(REPORTED) and c not in order]


def html_table(profile: str, csv: Path, base: Path) -> dict:
    """A table's CSV as header and rows for the template: cells with ``text``, ``reported`` (a thesis
    column) and, in a run column, ``links`` to the run's files."""
    frame = pd.read_csv(csv)
    columns = _columns(frame)
    header = [{"text": c[len(REPORTED):] + " (thesis)" if c.startswith(REPORTED) else c,
               "reported": c.startswith(REPORTED)} for c in columns]
    links_of: dict[str, list] = {}
    rows = []
    for record in frame.head(MAX_ROWS).to_dict("records"):
        row = []
        for column in columns:
            text = _cell(record[column])
            cell = {"text": text, "reported": column.startswith(REPORTED), "links": []}
            if run_column(column) and text:
                if text not in links_of:
                    links_of[text] = [{"label": label, "href": href(path, base)}
                                      for label, path in run_files(profile, text)]
                cell["links"] = links_of[text]
            row.append(cell)
        rows.append(row)
    return {"header": header, "rows": rows, "shown": len(rows), "total": len(frame)}


_CAPTION = re.compile(r"\\caption\{")
_UNESCAPE = {r"\textbackslash{}": "\\", r"\&": "&", r"\%": "%", r"\$": "$", r"\#": "#", r"\_": "_", r"\{": "{",
             r"\}": "}", r"\textasciitilde{}": "~", r"\textasciicircum{}": "^", r"\textless{}": "<",
             r"\textgreater{}": ">", r"\textbar{}": "|", r"$\uparrow$": "↑", r"$\downarrow$": "↓", "~": " "}


def tex_caption(tex: Path) -> str | None:
    """The caption of a rendered table, as text: the first ``\\caption{...}`` of its .tex with LaTeX's
    escapes undone (leanlm.reporting.latex escapes plain-text captions) and other commands reduced to their
    argument. None where the file has no caption."""
    text = tex.read_text(encoding="utf-8")
    found = _CAPTION.search(text)
    if not found:
        return None
    depth, i = 1, found.end()
    while i < len(text) and depth:
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    caption = text[found.end():i - 1]
    keep = {}
    for n, (escaped, plain) in enumerate(sorted(_UNESCAPE.items(), key=lambda kv: -len(kv[0]))):
        keep[f"\0{n}\0"] = plain
        caption = caption.replace(escaped, f"\0{n}\0")
    caption = re.sub(r"\\[A-Za-z]+\*?\{([^{}]*)\}", r"\1", caption)  # \textbf{x} -> x
    caption = re.sub(r"\\[A-Za-z]+\*?|[{}$]", "", caption)
    for token, plain in keep.items():
        caption = caption.replace(token, plain)
    return " ".join(caption.split())


def caption_of(profile: str, name: str) -> str:
    """What report.html and Snakemake's report say under an output: a figure's caption
    (leanlm.reporting.figures), a table's own caption from its .tex; empty without one (a folder of CSVs)."""
    if name in FIGURE_CAPTIONS:
        return FIGURE_CAPTIONS[name]
    tex = paths.tables_dir(profile) / f"{name}.tex"
    return (tex_caption(tex) if tex.is_file() else None) or ""


def png_data_uri(png: Path) -> str:
    """The PNG as a data: URI, so the report is one file that opens anywhere."""
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


@dataclass
class Chapter:
    number: int
    title: str
    items: list[dict] = field(default_factory=list)


def outputs_in(folder: Path, parts: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(tables, figures) as file stems: a figure has a .png, a table a .csv and no .png. From ``parts``
    (paths, as the pipeline names its run's outputs) or, with none, every output in ``folder``."""
    files = [Path(p) for p in parts] if parts else [p for p in folder.iterdir() if p.is_file()]
    stems = {p.stem for p in files if p.suffix in (".csv", ".png")} - NOT_OUTPUTS
    figures = sorted(s for s in stems if (folder / f"{s}.png").is_file())
    tables = sorted(s for s in stems - set(figures) if (folder / f"{s}.csv").is_file())
    return tables, figures


def chapters(profile: str, tables: list[str], figures: list[str], renderers: dict[str, str] | None = None) -> list[Chapter]:
    """Every table and figure in the thesis's order (leanlm.reporting.thesis_order), grouped by chapter."""
    folder = paths.tables_dir(profile)
    out: dict[int, Chapter] = {}
    for item in place(tables, figures, renderers):
        chapter = out.setdefault(item.chapter, Chapter(
            item.chapter, f"Chapter {item.chapter}: {CHAPTER_TITLES[item.chapter]}" if item.chapter in CHAPTER_TITLES
            else f"Chapter {item.chapter}" if item.chapter else "Other outputs"))
        entry = {"name": item.name, "kind": item.kind, "number": item.number, "in_thesis": item.in_thesis,
                 "caption": caption_of(profile, item.name),
                 "files": [{"label": f".{ext}", "href": href(folder / f"{item.name}.{ext}", folder)}
                           for ext in ("csv", "tex", "pdf", "png") if (folder / f"{item.name}.{ext}").is_file()]}
        if item.kind == "figure":
            entry["image"] = png_data_uri(folder / f"{item.name}.png")
        else:
            entry["table"] = html_table(profile, folder / f"{item.name}.csv", folder)
        chapter.items.append(entry)
    return list(out.values())
