"""LaTeX: the jinja2 environment of the table templates and escaping (tables.pdf: leanlm.reporting.tables_pdf).

Templates use delimiters that do not clash with LaTeX's braces and percent signs:

    \\VAR{expression}      a value          \\BLOCK{for x in xs} ... \\BLOCK{endfor}      a statement
    \\#{comment}

Every string that reaches a template goes through the ``tex`` filter (or ``cell`` for table cells),
which escapes LaTeX's special characters; markup belongs to the templates, never to the data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from leanlm import paths
from leanlm.errors import LeanLMError

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
