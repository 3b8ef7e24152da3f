"""tables.pdf: one profile's tables and figures compiled with pdflatex (``leanlm pdf``, the ``pdf`` rule).

Its own module, apart from leanlm.reporting.latex (the templates every table render uses), so that an
edit to the PDF build reruns only the ``pdf`` job, not the renders.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.io import atomic_path, write_text
from leanlm.scratch import scratch_dir
from leanlm.reporting.figures import FIGURE_CAPTIONS
from leanlm.reporting.latex import render_template
from leanlm.reporting.thesis_order import CHAPTER_TITLES, place

log = logging.getLogger(__name__)

DOCUMENT_TEMPLATE = "document.tex.j2"
CLAIMS_TABLE = "claims"  # claims.tex (leanlm.claims.report): set before the chapters, not numbered as the thesis's
VERDICT_ORDER = ("supported", "contradicted", "inconclusive", "untestable", "not run")


def document_source(profile: str, tables: list[str], figures: list[str], *, scale: dict | None = None,
                    claims: dict | None = None, renderers: dict[str, str] | None = None) -> str:
    """The LaTeX source of tables.pdf: a title page (the profile, its scale, the claims' verdicts), the
    contents, the claims table, then each chapter's tables and figures in the thesis's order and numbering
    (leanlm.reporting.thesis_order), every caption marked with the profile. ``tables`` and ``figures`` are
    file stems; ``scale`` is :func:`scale_summary`'s, ``claims`` :func:`claims_summary`'s."""
    scale = scale or {"short": f"{profile} profile", "notes": []}
    chapters: dict[int, dict] = {}
    for item in place([t for t in tables if t != CLAIMS_TABLE], figures, renderers):
        chapter = chapters.setdefault(item.chapter, {
            "number": item.chapter, "items": [],
            "title": (f"Chapter {item.chapter}: {CHAPTER_TITLES[item.chapter]}" if item.chapter in CHAPTER_TITLES
                      else f"Chapter {item.chapter}" if item.chapter else "Other outputs")})
        caption = FIGURE_CAPTIONS.get(item.name, item.name.replace("_", " ").capitalize())
        chapter["items"].append({"name": item.name, "kind": item.kind, "number": item.number,
                                 "in_thesis": item.in_thesis, "caption": caption})
    return render_template(DOCUMENT_TEMPLATE, profile=profile, scale=scale, claims=claims,
                           claims_table=CLAIMS_TABLE in tables, chapters=list(chapters.values()))


def scale_summary(config: dict) -> dict:
    """What scale a profile's numbers come from: ``short`` for every caption, ``notes`` (one per model size
    of the runs the profile runs, as a subset narrows it: not every size its ``models`` defines) for the
    title page and report.html."""
    from leanlm.reporting.render import scale_note
    from leanlm.runs import runs

    sizes = sorted({run.size for run in runs(config)})
    notes = [f"{size}: {scale_note(config, size)}" for size in sizes]
    below = any("not comparable" in note for note in notes)
    short = f"{config['profile']} profile" + (", below the thesis's scale" if below else "")
    return {"short": short, "notes": notes}


def claims_summary(path: Path) -> dict | None:
    """The claims' verdicts from claims.csv (leanlm.claims.report) for the title page, None without one:
    ``counts`` (verdict -> claims, in a fixed order) and ``rows`` (claim id, verdict)."""
    if not path.is_file():
        return None
    import pandas as pd

    frame = pd.read_csv(path, usecols=["claim", "claim_verdict"]).drop_duplicates("claim")
    rows = [{"id": c, "verdict": v} for c, v in zip(frame["claim"], frame["claim_verdict"])]
    seen = [v for v in VERDICT_ORDER if any(r["verdict"] == v for r in rows)]
    seen += sorted({r["verdict"] for r in rows} - set(seen))
    return {"counts": [(v, sum(r["verdict"] == v for r in rows)) for v in seen], "rows": rows}


def _latex_errors(log_text: str, context: int = 3) -> str:
    """The lines of a pdflatex log that say what went wrong ('!' lines and the lines after them)."""
    lines = log_text.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("!"):
            picked += lines[i : i + context + 1]
    return "\n".join(picked[:40]) or "\n".join(lines[-20:])


def _compile(workdir: Path, main: str, timeout: int) -> None:
    cmd = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", main]
    for _ in range(2):  # a second pass only when LaTeX asks for one (cross-references)
        try:
            proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise LeanLMError(
                f"pdflatex took more than {timeout} s on {main}; check the tables for runaway input"
            ) from None
        log_path = workdir / Path(main).with_suffix(".log")
        log_text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else proc.stdout
        if proc.returncode != 0:
            raise LeanLMError(f"pdflatex failed on {main} (exit {proc.returncode}):\n{_latex_errors(log_text)}")
        if "Rerun to get" not in log_text:
            overfull = [line for line in log_text.splitlines() if line.startswith("Overfull \\hbox")]
            if overfull:  # compiles, but a table runs into the margin: worth a look
                log.warning("%s: %d overfull boxes, e.g. %s", main, len(overfull), overfull[0])
            return


def _document_parts(out_dir: Path, parts: Sequence[str | Path] | None) -> tuple[list[Path], list[Path]]:
    """The tables (.tex) and figures (.pdf) tables.pdf is made of: ``parts`` (other suffixes ignored), or
    with none given every one in ``out_dir``. The pipeline gives the parts of its own run, so a table an
    earlier run left in the folder (another subset or experiment list) is not compiled in."""
    if parts is None:
        chosen = sorted(out_dir.glob("*.tex")) + sorted(out_dir.glob("*.pdf"))
    else:
        chosen = []
        for part in map(Path, parts):
            if part.suffix not in (".tex", ".pdf"):
                continue
            part = part if part.is_absolute() else paths.project_root() / part  # as Snakemake names them
            if part.resolve().parent != out_dir.resolve():
                raise LeanLMError(f"{part} is not in {out_dir}: tables.pdf is made of that folder's tables and figures")
            if not part.is_file():
                raise LeanLMError(f"{part} does not exist; render it first (snakemake builds it before tables.pdf)")
            chosen.append(out_dir / part.name)
    tables = sorted(p for p in set(chosen) if p.suffix == ".tex")
    figures = sorted(p for p in set(chosen) if p.suffix == ".pdf" and p.name != "tables.pdf")
    return tables, figures


def _renderers() -> dict[str, str]:
    """params/tables.yaml's renderer of each output, which places an output the thesis does not print in its
    chapter; none where the file cannot be read (a folder compiled outside a project)."""
    from leanlm.errors import ConfigError
    from leanlm.reporting.tables_file import load_tables

    try:
        return {name: spec.get("renderer", "") for name, spec in load_tables().items()}
    except ConfigError:
        return {}


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM (Snakemake stopping its jobs, ``kill``) raises SystemExit with the shell's
    code for it (143) instead of ending the process where it stands, so that the block's cleanup runs and a
    running pdflatex is killed (subprocess.run does on any exception). Signals go to the main thread only:
    elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def build_pdf(profile: str, parts: Sequence[str | Path] | None = None, timeout: int = 120,
              config: dict | None = None) -> Path | None:
    """Compile tables (.tex) and figures (.pdf) of paper_tables/<profile>/ into tables.pdf: ``parts``, or
    every one in the folder when none are given. With the profile's ``config``, the title page and every
    caption say what scale the numbers come from.

    Returns the PDF's path, or None (with a warning) when ``pdflatex`` is not installed. A LaTeX
    error is a :class:`LeanLMError` quoting the relevant lines of the log.
    """
    if shutil.which("pdflatex") is None:
        log.warning("pdflatex is not on PATH: tables.pdf is not built (install texlive-latex-recommended)")
        return None
    out_dir = paths.tables_dir(profile)
    out = out_dir / "tables.pdf"
    tables, figures = _document_parts(out_dir, parts)
    if not tables and not figures:
        raise LeanLMError(f"{out_dir} has no .tex tables and no figure .pdf files; render the tables first")
    # A folder of the system's temporary directory that a SIGTERM (below) still removes, and that the next
    # build removes when a SIGKILL left it (leanlm.scratch.scratch_dir).
    with _terminate_as_exit(), scratch_dir(tempfile.gettempdir(), "leanlm-latex") as workdir:
        # Copies under plain names: \input and \includegraphics then see no paths with odd characters.
        for path in tables + figures:
            shutil.copyfile(path, workdir / path.name)
        main = "leanlm-tables.tex"
        source = document_source(profile, [p.stem for p in tables], [p.stem for p in figures],
                                 scale=scale_summary(config) if config else None,
                                 claims=(claims_summary(out_dir / "claims.csv")
                                         if any(p.stem == CLAIMS_TABLE for p in tables) else None),
                                 renderers=_renderers())
        write_text(workdir / main, source)
        _compile(workdir, main, timeout)
        with atomic_path(out, suffix=".pdf") as dest:
            shutil.copyfile(workdir / Path(main).with_suffix(".pdf"), dest)
    log.info("compiled %d tables and %d figures into %s", len(tables), len(figures), out)
    return out
