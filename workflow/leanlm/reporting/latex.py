"""LaTeX: the jinja2 environment of the table templates, escaping, and the compiled tables.pdf.

Templates use delimiters that do not clash with LaTeX's braces and percent signs:

    \\VAR{expression}      a value          \\BLOCK{for x in xs} ... \\BLOCK{endfor}      a statement
    \\#{comment}

Every string that reaches a template goes through the ``tex`` filter (or ``cell`` for table cells),
which escapes LaTeX's special characters; markup belongs to the templates, never to the data.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from leanlm import paths
from leanlm.errors import LeanLMError
from leanlm.io import atomic_path, write_text

log = logging.getLogger(__name__)

_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
}
_SPECIALS_RE = re.compile("|".join(re.escape(c) for c in _SPECIALS))


def tex_escape(value) -> str:
    """``value`` as LaTeX text: special characters escaped, arrows as math symbols."""
    return _SPECIALS_RE.sub(lambda m: _SPECIALS[m.group()], str(value))


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, whether it is bold (best in its column), and a footnote mark.

    ``raw`` marks text that already is LaTeX (a formula such as ``$3d^2n$`` from a variant's
    Table 3.4 row) and must not be escaped.
    """

    text: str
    bold: bool = False
    mark: str = ""
    raw: bool = False

    def __str__(self) -> str:
        return self.text


def tex_cell(cell) -> str:
    """A :class:`Cell` (or any value) as LaTeX: escaped, bold where best, with its footnote mark."""
    if not isinstance(cell, Cell):
        return tex_escape(cell)
    text = cell.text if cell.raw else tex_escape(cell.text)
    if cell.bold:
        text = rf"\textbf{{{text}}}"
    if cell.mark:
        text += rf"$^{{\mathrm{{{tex_escape(cell.mark)}}}}}$"
    return text


def template_env(directory: Path | None = None) -> jinja2.Environment:
    """The jinja2 environment for workflow/templates/*.tex.j2 (LaTeX-friendly delimiters)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory or paths.templates_dir())),
        block_start_string=r"\BLOCK{",
        block_end_string="}",
        variable_start_string=r"\VAR{",
        variable_end_string="}",
        comment_start_string=r"\#{",
        comment_end_string="}",
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        undefined=jinja2.StrictUndefined,  # a typo in a template fails loudly, not as blank cells
        keep_trailing_newline=True,
    )
    env.filters["tex"] = tex_escape
    env.filters["cell"] = tex_cell
    return env


def render_template(template: str, **context) -> str:
    """Render workflow/templates/``template`` with ``context``; a missing template is a LeanLMError."""
    try:
        return template_env().get_template(template).render(**context)
    except jinja2.TemplateNotFound:
        path = paths.templates_dir() / template
        raise LeanLMError(f"template {path} does not exist; add it (one template per table)") from None


# ----------------------------------------------------------------------------- tables.pdf
DOCUMENT_TEMPLATE = "document.tex.j2"


def _figure_captions() -> dict[str, str]:
    from leanlm.reporting.figures import FIGURE_CAPTIONS

    return FIGURE_CAPTIONS


def document_source(profile: str, tables: list[str], figures: list[str]) -> str:
    """The LaTeX source of tables.pdf: every table \\input, every figure included (names without suffix)."""
    captions = _figure_captions()
    return render_template(
        DOCUMENT_TEMPLATE,
        profile=profile,
        tables=tables,
        figures=[{"name": f, "caption": captions.get(f, f.replace("_", " ").capitalize())} for f in figures],
    )


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


def build_pdf(profile: str, parts: Sequence[str | Path] | None = None, timeout: int = 120) -> Path | None:
    """Compile tables (.tex) and figures (.pdf) of paper_tables/<profile>/ into tables.pdf: ``parts``, or
    every one in the folder when none are given.

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
    with tempfile.TemporaryDirectory(prefix="leanlm-latex-") as tmp:
        workdir = Path(tmp)
        # Copies under plain names: \input and \includegraphics then see no paths with odd characters.
        for path in tables + figures:
            shutil.copyfile(path, workdir / path.name)
        main = "leanlm-tables.tex"
        write_text(workdir / main, document_source(profile, [p.stem for p in tables], [p.stem for p in figures]))
        _compile(workdir, main, timeout)
        with atomic_path(out, suffix=".pdf") as dest:
            shutil.copyfile(workdir / Path(main).with_suffix(".pdf"), dest)
    log.info("compiled %d tables and %d figures into %s", len(tables), len(figures), out)
    return out
