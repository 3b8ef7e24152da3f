"""The `analytic` outputs: counts from instantiated modules against the thesis's printed numbers."""

from pathlib import Path

import pandas as pd
import pytest

from leanlm.errors import ConfigError
from leanlm.modeling.attention import ATTENTION
from leanlm.reporting import analytic
from leanlm.reporting.reported import load_reported

REPO = Path(__file__).resolve().parents[1]

# Table 3.13 as printed: weights, gradients, Adam states, activations, total (bytes), saving ratio (%).
TABLE_3_13 = {
    "SHA": (4423680, 4423680, 5898240, 25165824, 39911424, 44.84),
    "MHA": (14155776, 14155776, 18874368, 25165824, 72351744, 0.00),
    "EL-ATT": (7077888, 7077888, 9437184, 25165824, 48758784, 32.61),
    "MQA": (7667712, 7667712, 10223616, 25165824, 50724864, 29.89),
    "SKV": (10616832, 10616832, 14155776, 25165824, 60555264, 16.30),
    "MHE-ADD": (4437504, 4437504, 5916672, 25165824, 39957504, 44.77),
    "MHE-MUL": (4437504, 4437504, 5916672, 25165824, 39957504, 44.77),
}
LABELS = {"sha": "SHA", "mha": "MHA", "el_att": "EL-ATT", "mqa": "MQA", "skv": "SKV", "mhe_add": "MHE-ADD",
          "mhe_mul": "MHE-MUL"}


@pytest.fixture
def root(scratch_root):
    return scratch_root


def test_table_3_13_equals_the_printed_values_exactly():
    frame = analytic.table_3_13_frame().set_index("attention")
    expected_rows = [LABELS[n] for n in analytic.CH3_VARIANTS if n in ATTENTION]
    assert list(frame.index) == expected_rows
    assert {"SHA", "MHA", "MHE-ADD", "MHE-MUL"} <= set(frame.index)
    for label, printed in TABLE_3_13.items():
        if label not in frame.index:
            continue  # the variant is not registered yet: its row appears once it is
        row = frame.loc[label]
        counted = [int(row[c]) for c in analytic.MEMORY_COLUMNS]
        assert counted == list(printed[:5]), label
        assert round(row["saving_ratio"], 2) == printed[5], label
        assert list(row[[f"reported_{c}" for c in analytic.MEMORY_COLUMNS]]) == list(printed[:5])


def test_reported_table_3_13_transcription_matches_the_thesis():
    reported = load_reported("table_3_13")
    for label, printed in TABLE_3_13.items():
        assert tuple(reported.loc[label]) == pytest.approx(printed), label


def test_block_counts_give_table_3_1_params_at_bert_base():
    # 12 layers at 12 heads of 64: Table 3.1's 8.85M, 28.32M (printed; 28,311,552 exactly), 8.88M.
    assert 12 * analytic.block_parameters("sha", 12, 64) == 8_847_360
    assert 12 * analytic.block_parameters("mha", 12, 64) == 28_311_552
    assert 12 * analytic.block_parameters("mhe_mul", 12, 64) == 8_875_008
    assert 12 * analytic.block_parameters("mhe_add", 12, 64) == 8_875_008


@pytest.mark.parametrize("n,d", [(12, 64), (3, 8), (16, 128)])
def test_table_3_4_counts_equal_the_closed_forms(n, d):
    frame = analytic.table_3_4_frame(n, d).set_index("attention")
    closed = {  # Table 3.4, written out here independently of the variants' own formulas
        "SHA": (3 * d * d * n, 0),
        "MHA": (3 * d * d * n * n, (3 * n * n - 3 * n) * d * d),
        "EL-ATT": (d * d * n * n, (n * n - 3 * n) * d * d),
        "MQA": (d * d * n * n + 2 * d * d * n, (n * n - n) * d * d),
        "SKV": (2 * d * d * n * n, (2 * n * n - 3 * n) * d * d),
        "MHE-ADD": (3 * d * d * n + 3 * d * n, 3 * n * d),
        "MHE-MUL": (3 * d * d * n + 3 * d * n, 3 * n * d),
    }
    for label, row in frame.iterrows():
        assert (row["params"], row["params_extra"]) == closed[label], label
        assert (row["formula_params"], row["formula_params_extra"]) == closed[label], label


def test_table_3_4_formulas_are_the_printed_ones():
    frame = analytic.table_3_4_frame().set_index("attention")
    for label, row in frame.iterrows():
        for ours, printed in (("complexity", "reported_complexity"), ("params_formula", "reported_params_formula"),
                              ("params_extra_formula", "reported_params_extra_formula")):
            assert analytic._same_latex(row[ours], row[printed]), (label, row[ours], row[printed])


def test_main_writes_every_analytic_output(root):
    written = analytic.main("smoke")
    out = root / "paper_tables" / "smoke"
    expected = {out / f"{n}.{e}" for n, e in [("table_3_4", "tex"), ("table_3_4", "csv"), ("table_3_13", "tex"),
                                               ("table_3_13", "csv"), ("figure_3_1", "pdf"), ("figure_3_1", "png"),
                                               ("figure_3_1", "csv")]}
    assert expected <= set(written)  # chapter 3's further items (test_analytic_ch3) are written too
    assert {p.stem for p in written} == set(analytic.ANALYTIC.names())
    for path in expected:
        assert path.stat().st_size > 0, path
    assert (out / "figure_3_1.pdf").read_bytes().startswith(b"%PDF")
    assert (out / "figure_3_1.png").read_bytes().startswith(b"\x89PNG")

    fig = pd.read_csv(out / "figure_3_1.csv")
    assert list(fig["n_heads"]) == list(range(1, 65))
    n = fig["n_heads"]
    assert (fig["params_mha"] == 3 * (64 * n) ** 2).all()          # 3 d^2 n^2, d = 64
    assert (fig["params_mhe_mul"] == 3 * 64 * 64 * n + 3 * 64 * n).all()
    assert fig["params_mha"].iloc[-1] == 50_331_648

    t313 = (out / "table_3_13.tex").read_text()
    assert r"SHA & \textbf{4423680} & \textbf{4423680} & \textbf{5898240} & 25165824 & \textbf{39911424} & \textbf{44.84}" in t313
    assert r"\quad\textit{thesis} & \textit{14155776}" in t313
    t34 = (out / "table_3_4.tex").read_text()
    assert r"MHA & $\mathcal{O}(n^2)$ & $3d^2n^2$ & $(3n^2 - 3n)d^2$ & 1,769,472 & 1,622,016 \\" in t34
    assert pd.read_csv(out / "table_3_4.csv")["params"].iloc[0] == 147_456


def test_a_formula_unlike_the_printed_one_gets_a_note(root):
    reported = root / "params" / "reported" / "table_3_4.csv"
    reported.write_text(reported.read_text().replace("MHA,$\\mathcal{O}(n^2)$,$3d^2n^2$", "MHA,$\\mathcal{O}(n^2)$,$3n^2d^2$"))
    analytic.main("smoke", "table_3_4")
    tex = (root / "paper_tables" / "smoke" / "table_3_4.tex").read_text()
    assert r"MHA & $\mathcal{O}(n^2)$ & $3d^2n^2$$^{\mathrm{a}}$ &" in tex
    assert r"$^{\mathrm{a}}$\,MHA: the thesis prints $3n^2d^2$." in tex


def test_one_item_and_unknown_items(root):
    assert [p.name for p in analytic.main("smoke", "table_3_13")] == ["table_3_13.tex", "table_3_13.csv"]
    with pytest.raises(ConfigError, match="unknown analytic item 'table_3_99'"):
        analytic.main("smoke", "table_3_99")
