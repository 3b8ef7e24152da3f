"""tables.pdf: the document template and the pdflatex build (compiled only where pdflatex exists)."""

import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest

from leanlm.errors import LeanLMError
from leanlm.reporting import figures, tables_pdf

REPO = Path(__file__).resolve().parents[1]
needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None, reason="pdflatex not installed (CI installs texlive-latex-recommended)"
)

TABLE = r"""\begin{table}[htbp]
\centering
\caption{A small table with 50\% of a\_b.}
\begin{tabular}{lr}
\toprule
Attention & Acc$\uparrow$ \\
\midrule
MHE-MUL & \textbf{80.6 (0.2)} \\
\bottomrule
\end{tabular}
\end{table}
"""


@pytest.fixture
def root(tmp_path, monkeypatch):
    shutil.copytree(REPO / "workflow" / "templates", tmp_path / "workflow" / "templates")
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    out = tmp_path / "paper_tables" / "smoke"
    out.mkdir(parents=True)
    (out / "table_b.tex").write_text(TABLE)
    (out / "table_a.tex").write_text(TABLE.replace("MHE-MUL", "SHA"))
    frame = pd.DataFrame({"n": [1, 2, 3], "y": [1.0, 4.0, 9.0]})
    figures.line_plot(frame, "n", [("y", "MHA")], "heads", "parameters", out / "figure_3_1")
    return tmp_path


def test_document_lists_tables_sorted_and_figures_with_captions(root):
    source = tables_pdf.document_source("smoke", ["table_a", "table_b"], ["figure_3_1"])
    assert source.index(r"\input{table_a}") < source.index(r"\input{table_b}")
    assert r"\includegraphics[width=0.75\linewidth]{figure_3_1.pdf}" in source
    assert "thesis Figure 3.1" in source and r"\usepackage{booktabs}" in source


def test_without_pdflatex_build_pdf_returns_none_with_a_warning(root, monkeypatch, caplog):
    monkeypatch.setattr(tables_pdf.shutil, "which", lambda name: None)
    with caplog.at_level(logging.WARNING):
        assert tables_pdf.build_pdf("smoke") is None
    assert "pdflatex is not on PATH" in caplog.text
    assert not (root / "paper_tables" / "smoke" / "tables.pdf").exists()


def test_nothing_to_compile_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LEANLM_ROOT", str(tmp_path))
    (tmp_path / "paper_tables" / "smoke").mkdir(parents=True)
    if shutil.which("pdflatex") is None:
        monkeypatch.setattr(tables_pdf.shutil, "which", lambda name: "/usr/bin/pdflatex")
    with pytest.raises(LeanLMError, match="no .tex tables"):
        tables_pdf.build_pdf("smoke")


@needs_pdflatex
def test_build_pdf_compiles_tables_and_figures(root):
    out = tables_pdf.build_pdf("smoke")
    assert out == root / "paper_tables" / "smoke" / "tables.pdf"
    data = out.read_bytes()
    assert data.startswith(b"%PDF") and len(data) > 5000
    # no temporary files or LaTeX by-products left beside the outputs
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "figure_3_1.pdf", "figure_3_1.png", "table_a.tex", "table_b.tex", "tables.pdf"]


@needs_pdflatex
def test_latex_error_quotes_the_log(root):
    (root / "paper_tables" / "smoke" / "table_c.tex").write_text(r"\begin{table}\undefinedmacro\end{table}")
    with pytest.raises(LeanLMError, match=r"(?s)pdflatex failed.*Undefined control sequence.*undefinedmacro"):
        tables_pdf.build_pdf("smoke")
    assert not (root / "paper_tables" / "smoke" / "tables.pdf").exists()


def test_the_parts_given_are_the_document(root):
    """The pipeline passes its run's tables and figures: a table another run left in the folder stays out;
    other suffixes (the figure's .png, the CSVs) are passed over; no parts means the whole folder."""
    out = root / "paper_tables" / "smoke"
    tables, figs = tables_pdf._document_parts(out, ["paper_tables/smoke/table_b.tex", str(out / "figure_3_1.pdf"),
                                               "paper_tables/smoke/figure_3_1.png"])
    assert (tables, figs) == ([out / "table_b.tex"], [out / "figure_3_1.pdf"])
    assert tables_pdf._document_parts(out, None) == ([out / "table_a.tex", out / "table_b.tex"], [out / "figure_3_1.pdf"])
    with pytest.raises(LeanLMError, match=r"table_c\.tex does not exist; render it first"):
        tables_pdf._document_parts(out, ["paper_tables/smoke/table_c.tex"])
    with pytest.raises(LeanLMError, match=r"is not in .*paper_tables/smoke: tables.pdf is made of that folder's"):
        tables_pdf._document_parts(out, ["paper_tables/paper/table_a.tex"])


@needs_pdflatex
def test_build_pdf_compiles_only_the_given_parts(root, monkeypatch):
    seen = {}
    original = tables_pdf.document_source

    def recording(profile, tables, figures):
        seen.update(tables=tables, figures=figures)
        return original(profile, tables, figures)

    monkeypatch.setattr(tables_pdf, "document_source", recording)
    out = tables_pdf.build_pdf("smoke", parts=["paper_tables/smoke/table_a.tex"])
    assert out.read_bytes().startswith(b"%PDF")
    assert seen == {"tables": ["table_a"], "figures": []}



@needs_pdflatex
def test_readme_pdf_command_compiles_the_named_parts_or_the_whole_folder(scratch_root, capsys):
    """README: ``leanlm pdf --params params/smoke.yaml [FILE ...]``."""
    from leanlm import cli

    out_dir = scratch_root / "paper_tables" / "smoke"
    out_dir.mkdir(parents=True)
    (out_dir / "table_a.tex").write_text(TABLE)
    params = str(scratch_root / "params" / "smoke.yaml")
    assert cli.main(["pdf", "--params", params, "paper_tables/smoke/table_a.tex"]) in (0, None)
    out = out_dir / "tables.pdf"
    assert capsys.readouterr().out.strip() == str(out) and out.read_bytes().startswith(b"%PDF")
    out.unlink()
    assert cli.main(["pdf", "--params", params]) in (0, None)
    assert out.read_bytes().startswith(b"%PDF")
