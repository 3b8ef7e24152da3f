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


# ------------------------------------------------------------------ the thesis's order and numbering (issue 26)
THESIS = Path("/work/shared/seeds/thesis_efficient_transformers.txt")
SMOKE_OUTPUTS = (["table_2_1", "table_2_2", "table_2_2_parameters", "table_2_3", "table_2_side_by_side", "table_3_1",
                  "table_3_10", "table_3_2", "table_4_1", "table_4_10", "table_4_9", "gpt3_projection", "claims"],
                 ["figure_3_1", "figure_4_1", "figure_4_5"])


@pytest.mark.skipif(not THESIS.is_file(), reason="the thesis text (project seed) is not on this machine")
def test_the_order_is_the_thesis_own_caption_order():
    import re

    from leanlm.reporting.thesis_order import THESIS_ORDER

    seen = []
    for line in THESIS.read_text(encoding="utf-8").splitlines():
        found = re.match(r"^(Table|Figure) ([2-4])\.(\d+):", line)
        name = found and f"{found.group(1).lower()}_{found.group(2)}_{found.group(3)}"
        if name and name not in seen:
            seen.append(name)
    assert tuple(seen) == THESIS_ORDER


def test_outputs_follow_the_thesis_with_its_numbers_and_extras_lettered_at_their_chapter_end():
    from leanlm.reporting.thesis_order import place

    renderers = {"gpt3_projection": "leanlm.reporting.ch3.analytic:gpt3_projection"}
    placed = place([t for t in SMOKE_OUTPUTS[0] if t != "claims"], SMOKE_OUTPUTS[1], renderers)
    assert [(p.name, p.number) for p in placed] == [
        ("table_2_1", "2.1"), ("table_2_2", "2.2"), ("table_2_3", "2.3"),
        ("table_2_2_parameters", "2.A"), ("table_2_side_by_side", "2.B"),
        ("figure_3_1", "3.1"), ("table_3_1", "3.1"), ("table_3_2", "3.2"), ("table_3_10", "3.10"),
        ("gpt3_projection", "3.A"),
        ("table_4_1", "4.1"), ("figure_4_1", "4.1"), ("table_4_9", "4.9"), ("figure_4_5", "4.5"),
        ("table_4_10", "4.10")]
    assert place(["summary_x"], [])[0].number == "A" and place(["summary_x"], [])[0].chapter == 0


def test_the_document_numbers_each_output_as_the_thesis_and_marks_every_caption_with_the_scale():
    from leanlm.config import load_config

    config = load_config(REPO / "params" / "smoke.yaml")
    claims = {"counts": [("supported", 1), ("untestable", 2)],
              "rows": [{"id": "ch2_a", "verdict": "supported"}, {"id": "ch4_b", "verdict": "untestable"}]}
    source = tables_pdf.document_source("smoke", *SMOKE_OUTPUTS, scale=tables_pdf.scale_summary(config),
                                        claims=claims)
    order = [source.index(s) for s in (r"\input{claims}", r"\input{table_2_1}", r"\input{table_2_side_by_side}",
                                       "{figure_3_1.pdf}", r"\input{table_3_2}", r"\input{table_3_10}",
                                       r"\input{table_4_9}", "{figure_4_5.pdf}", r"\input{table_4_10}")]
    assert order == sorted(order)
    assert "\\renewcommand{\\thetable}{3.10}\n\\input{table_3_10}" in source
    assert "\\renewcommand{\\thefigure}{4.5}" in source and r"\tableofcontents" in source
    assert r"\tablename~\thetable\ (smoke profile, below the thesis's scale)" in source
    assert "1 supported, 2 untestable." in source and r"ch4\_b & untestable" in source
    assert "not comparable in magnitude to the thesis" in source  # the title page's note per model size
    assert "bert: smoke profile: 2 layers, d=64" in source


@needs_pdflatex
def test_the_compiled_lists_carry_the_thesis_numbers_in_order(root, tmp_path):
    out = root / "paper_tables" / "smoke"
    for name in ("table_3_10", "table_3_2", "table_2_side_by_side", "claims"):
        (out / f"{name}.tex").write_text(TABLE.replace("A small table", f"Output {name}".replace("_", "-")))
    pd.DataFrame({"claim": ["ch2_a", "ch2_a"], "claim_verdict": ["untestable"] * 2}).to_csv(out / "claims.csv")
    work = tmp_path / "latex"
    work.mkdir()
    for path in list(out.glob("*.tex")) + [out / "figure_3_1.pdf"]:
        shutil.copyfile(path, work / path.name)
    tables = sorted(p.stem for p in out.glob("*.tex"))
    claims = tables_pdf.claims_summary(out / "claims.csv")
    (work / "doc.tex").write_text(tables_pdf.document_source("smoke", tables, ["figure_3_1"], claims=claims))
    tables_pdf._compile(work, "doc.tex", 120)
    lot = (work / "doc.lot").read_text()
    numbers = [line.split("numberline {")[1].split("}")[0] for line in lot.splitlines() if "numberline" in line]
    assert numbers == ["C", "2.A", "3.2", "3.10", "A", "B"]  # claims, ch. 2's extra, ch. 3; table_a/b: no chapter
    assert "numberline {3.1}" in (work / "doc.lof").read_text()
    assert claims == {"counts": [("untestable", 1)], "rows": [{"id": "ch2_a", "verdict": "untestable"}]}


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

    def recording(profile, tables, figures, **kw):
        seen.update(tables=tables, figures=figures)
        return original(profile, tables, figures, **kw)

    monkeypatch.setattr(tables_pdf, "document_source", recording)
    out = tables_pdf.build_pdf("smoke", parts=["paper_tables/smoke/table_a.tex"])
    assert out.read_bytes().startswith(b"%PDF")
    assert seen == {"tables": ["table_a"], "figures": []}



@needs_pdflatex
def test_readme_pdf_command_compiles_the_named_parts_or_the_whole_folder(scratch_root, capsys):
    """docs/commands.md: ``leanlm pdf --params params/smoke.yaml [FILE ...]``."""
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
