"""Tables 4.5-4.8: the printed formulas against FLOPs, activations and caches measured on mixers."""

import pytest

from leanlm.reporting.ch4 import formulas as ch4

SIZE = {"B": 1, "L": 64, "d": 128, "h": 2}  # d_h = 64, as in the thesis
B, L, d, h = 1, 64, 128, 2


@pytest.fixture(scope="module")
def tables():
    return ch4.ch4_formula_tables(SIZE)


def by_variant(frame, stage=None):
    if stage is not None:
        frame = frame[frame["stage"] == stage]
    return frame.set_index("variant")


def test_frames_hold_the_thesis_formulas(tables):
    t45 = by_variant(tables["table_4_5"])
    assert t45.loc["standard", "formula"] == "BL^2d + BLd^2"
    assert t45.loc["non_approximate", "formula"] == "BLd^2"
    assert by_variant(tables["table_4_6"], "prefill").loc["approximate", "formula"] == "14BLd^2"
    assert by_variant(tables["table_4_7"]).loc["rnd_emb_qk", "formula"] == "(4BLd + 8Ld + 2L^2h)/t"
    assert by_variant(tables["table_4_8"]).loc["approximate", "formula"] == "6Bd + 4Bd^2/h"
    for frame in tables.values():
        assert {"formula", "formula_value", "measured", "ratio"} <= set(frame.columns)
        assert len(frame["variant"].unique()) == 8


def test_cache_sizes_equal_table_4_8(tables):
    """Bytes of the bf16 decoding state: exactly the printed formulas (Approx. in the appendix's
    per-term form; the default joint form keeps full second-order features, far more)."""
    t = by_variant(tables["table_4_8"])
    for name in t.index.drop("approximate"):
        assert t.loc[name, "measured"] == t.loc[name, "formula_value"], name
    assert t.loc["mlp", "measured"] == 0
    assert t.loc["approximate", "measured"] > 10 * t.loc["approximate", "formula_value"]


def test_flops_equal_table_4_6_where_its_accounting_applies(tables):
    pre, dec = by_variant(tables["table_4_6"], "prefill"), by_variant(tables["table_4_6"], "decode")
    for name in ("standard", "static_emb_qk"):
        assert pre.loc[name, "measured"] == pre.loc[name, "formula_value"] == 4 * B * L * L * d + 6 * B * L * d * d
        assert dec.loc[name, "measured"] == dec.loc[name, "formula_value"]
    assert dec.loc["non_approximate", "measured"] == 6 * B * d * d
    # Cached fixed (q, k): the formula's Q/K projections (4BLd^2, decode 4Bd^2) are not spent.
    for name in ("rnd_emb_qk", "fixed_seq_qk"):
        assert pre.loc[name, "measured"] == pre.loc[name, "formula_value"] - 4 * B * L * d * d
        assert dec.loc[name, "measured"] == dec.loc[name, "formula_value"] - 4 * B * d * d
    # MLP: three d x w GEMMs with w matched to attention's parameters.
    w = round((4 * d * d + 3 * d) / (3 * d))
    assert pre.loc["mlp", "measured"] == 6 * B * L * d * w
    assert dec.loc["mlp", "measured"] == 6 * B * d * w


def test_activation_memory_equals_table_4_7_for_softmax_variants(tables):
    t = by_variant(tables["table_4_7"])
    for name in ("standard", "static_emb_qk", "rnd_emb_qk", "fixed_seq_qk"):
        assert t.loc[name, "measured"] == t.loc[name, "formula_value"], name


def test_complexity_rows_order_variants_as_the_thesis(tables):
    t = by_variant(tables["table_4_5"])
    assert list(t.index[:3]) == ["standard", "mlp", "approximate"]
    # Linear-in-L variants grow slower with L than standard attention.
    growth = {name: ch4.measure(name, B, 2 * L, d, h)["flops_prefill"] / t.loc[name, "measured"]
              for name in ("standard", "non_approximate")}
    assert growth["non_approximate"] < growth["standard"]
