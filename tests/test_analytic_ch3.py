"""Chapter 3's analytic items: Figures 3.3/3.4, the GPT-3 projection and the thesis-scale #params.

Counts come from instantiated modules (analytic_ch3); they are checked here against closed forms
written out independently and against every number the thesis prints.
"""

import pandas as pd
import pytest

from leanlm.modeling.attention import ATTENTION
from leanlm.modeling.models import MODELS, _import_all, model_key
from leanlm.reporting import analytic
from leanlm.reporting.ch3.analytic import (
    ch3_parameter_counts_frame,
    figure_3_3_frame,
    figure_3_4_frame,
    fmt_billions,
    gpt3_projection_frame,
)
from leanlm.reporting.reported import load_reported


def qkv(name: str, n: int, d: int) -> int:
    """Table 3.4's closed forms (Q, K, V weights of one sublayer, d_m = n d)."""
    return {"sha": 3 * d * d * n, "mha": 3 * d * d * n * n, "el_att": d * d * n * n,
            "mqa": d * d * n * n + 2 * d * d * n, "skv": 2 * d * d * n * n,
            "mhe_add": 3 * d * d * n + 3 * d * n, "mhe_mul": 3 * d * d * n + 3 * d * n}[name]


def test_figure_3_3_counts_and_the_theses_prose():
    frame = figure_3_3_frame().set_index("n_heads")
    assert list(frame.index)[-1] == 128
    for n, row in frame.iterrows():
        for name in analytic.ch3_variants():
            assert row[f"params_{name}"] == qkv(name, n, 64), (name, n)
    at128 = frame.loc[128]
    assert at128["params_mha"] == 201_326_592 > 200e6                     # "more than 200M with 128 heads"
    assert at128["params_skv"] * 3 == at128["params_mha"] * 2             # SKV: 2/3
    assert at128["params_el_att"] * 3 == at128["params_mha"]              # EL-ATT: 1/3
    assert at128["params_mqa"] / at128["params_mha"] == pytest.approx(1 / 3, abs=0.01)   # MQA: about 1/3
    assert at128["params_mhe_mul"] / at128["params_mha"] == pytest.approx(0.01, abs=0.0025)   # MHE: about 1%


def test_figure_3_4_counts_and_the_theses_prose():
    frame = figure_3_4_frame().set_index(["n_layers", "n_heads"])
    assert sorted(frame.index) == [(l, h) for l in (12, 24, 48) for h in (32, 64)]
    for (layers, heads), row in frame.iterrows():
        for name in analytic.ch3_variants():
            assert row[f"params_{name}"] == layers * qkv(name, heads, 64)
    assert frame.loc[(24, 64), "params_mha"] == 1_207_959_552 > 1e9      # MHA, 24 layers, 64 heads: over 1B
    assert frame.loc[(48, 64), "params_el_att"] == 805_306_368           # EL-ATT and MQA reach 0.8B at 48 layers
    assert frame.loc[(48, 64), "params_mqa"] == 830_472_192
    assert frame.loc[(24, 64), "params_skv"] == 805_306_368              # SKV at 24 layers
    assert frame.loc[(48, 64), "params_mhe_mul"] == 38_338_560 < 0.1e9  # MHE stays under 0.1B
    assert frame.loc[(48, 32), "params_mha"] == frame.loc[(12, 64), "params_mha"]   # 48L/32H = 12L/64H


def test_gpt3_projection_counts_and_printed_values():
    frame = gpt3_projection_frame().set_index("attention")
    exact = {"MHA": 43_486_543_872, "EL-ATT": 14_495_514_624, "MQA": 14_797_504_512, "SKV": 28_991_029_248,
             "MHE-ADD": 456_523_776, "MHE-MUL": 456_523_776, "SHA": 452_984_832}
    assert {label: int(frame.loc[label, "params"]) for label in exact} == exact
    printed = load_reported("gpt3_projection")
    for label in printed.index:
        shown = fmt_billions(frame.loc[label, "params"])
        # the thesis rounds every count but MHA's, which it cuts: 43.4865B printed as 43.48B
        assert shown == ("43.49B" if label == "MHA" else printed.loc[label, "params"]), label
    assert printed.loc["MHA", "params"] == "43.48B"
    assert frame.loc["MHE-MUL", "reduction_vs_mha"] == pytest.approx(98.95, abs=0.001)   # printed "98.9"
    assert frame.loc["MHE-MUL", "reported_reduction_vs_mha"] == 98.9


def test_analytic_items_write_their_files(scratch_root):
    out = scratch_root / "paper_tables" / "smoke"
    for item, suffixes in (("figure_3_3", ("pdf", "png", "csv")), ("figure_3_4", ("pdf", "png", "csv")),
                           ("gpt3_projection", ("tex", "csv"))):
        written = analytic.main("smoke", item)
        assert sorted(p.name for p in written) == sorted(f"{item}.{s}" for s in suffixes)
    assert (out / "figure_3_3.pdf").read_bytes().startswith(b"%PDF")
    assert (out / "figure_3_4.png").read_bytes().startswith(b"\x89PNG")
    assert pd.read_csv(out / "figure_3_4.csv")["params_mha"].max() == 48 * 3 * 4096 ** 2
    tex = (out / "gpt3_projection.tex").read_text()
    assert r"MHA & 43.49B & 0.0 \\" in tex
    assert r"\quad\textit{thesis} & \textit{43.48B$^{\mathrm{a}}$} & \textit{-} \\" in tex
    assert "43,486,543,872" in tex and "98.950" in tex


@pytest.fixture(scope="module")
def counts():
    _import_all()  # the model classes register on import
    for backbone, head in (("bert", "mlm"), ("gpt2", "causal_lm"), ("transformer", "seq2seq")):
        if model_key(backbone, head) not in MODELS:
            pytest.skip(f"model {backbone}:{head} is not registered yet (modeling/decoder.py, seq2seq.py)")
    return ch3_parameter_counts_frame()


def test_every_printed_count_is_the_models_count(counts):
    printed = counts[counts["reported"] != ""]
    # Tables 3.1-3.3 print all seven variants at BASE; 3.14/3.15 print MHA and MHE-MUL at ten sizes
    assert len(printed) == 3 * 7 + 8 * 2
    mismatched = printed[~printed["matches"].astype(bool)]
    # The one exception: MHA at BERT-/GPT2-base is printed 28.32M; 12 x 4 x 768^2 = 28,311,552 (28.31M).
    assert set(zip(mismatched["attention"], mismatched["config"])) == {("MHA", "encoder_base"), ("MHA", "decoder_base")}
    assert set(mismatched["params"]) == {12 * 4 * 768 ** 2} and set(mismatched["reported"]) == {"28.32M"}


def test_counts_at_the_thesis_scale(counts):
    by = counts.set_index(["name", "config"])
    exact = {  # attention blocks x per-block weights (Table 3.13's convention, output projection included)
        ("sha", "encoder_base"): 8_847_360, ("mhe_mul", "encoder_base"): 8_875_008,
        ("mha", "encoder_large"): 100_663_296, ("mhe_mul", "decoder_medium"): 29_958_144,
        ("sha", "encdec_base"): 6_488_064, ("el_att", "encdec_base"): 9_437_184, ("mqa", "encdec_base"): 10_616_832,
        ("mhe_mul", "encdec_h16"): 5_630_976, ("mhe_mul", "encdec_h4"): 8_285_184, ("mha", "encdec_4l"): 12_582_912,
        ("mha", "encdec_12h"): 42_467_328, ("mha", "encdec_big"): 75_497_472, ("mhe_mul", "encdec_big"): 22_468_608,
    }
    assert {k: int(by.loc[k, "params"]) for k in exact} == exact
    assert by.loc[("mha", "encdec_base"), "blocks"] == 18      # 6 encoder self + 6 decoder self + 6 cross
    assert by.loc[("mha", "encdec_8l"), "blocks"] == 24
    assert set(counts["name"]) == {n for n in analytic.CH3_VARIANTS if n in ATTENTION}


def test_parameter_counts_table_marks_the_printed_exception(scratch_root, counts):
    tex_path, csv_path = analytic.main("smoke", "ch3_parameter_counts")
    tex = tex_path.read_text()
    assert tex.startswith(r"\begin{landscape}")
    assert r"MHA & 28.31M & 100.66M & 28.31M & 100.66M & 18.87M" in tex
    assert r"\textit{28.32M$^{\mathrm{a}}$}" in tex and "28,311,552 (28.31M)" in tex
    assert len(pd.read_csv(csv_path)) == len(counts)
