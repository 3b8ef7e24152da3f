"""Layer layouts of ch. 4: uniform, hybrid, Table 4.11's nine ablations, and skip."""

import pytest

from leanlm.errors import ConfigError
from leanlm.modeling.layouts import (
    TABLE_4_11_LAYOUTS,
    check_skip_layers,
    layer_kinds,
    skip_set,
    standard_layers,
)

# Table 4.11 as printed (standard layer IDs, 1-indexed, 24-layer 500M model).
TABLE_4_11 = {
    "even": {2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24},
    "odd": {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23},
    "top": {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
    "middle": {1, 2, 3, 4, 5, 6, 19, 20, 21, 22, 23, 24},
    "bottom": {13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24},
    "25%": {4, 8, 12, 16, 20, 24},
    "first": {1},
    "last": {24},
    "bilateral": {1, 24},
}


@pytest.mark.parametrize("layout", list(TABLE_4_11))
def test_nine_layouts_equal_table_4_11(layout):
    kinds = layer_kinds(layout, 24)
    assert {i + 1 for i, k in enumerate(kinds) if k == "standard"} == TABLE_4_11[layout]
    assert all(k in ("standard", "simple") for k in kinds) and len(kinds) == 24


def test_table_order_and_names():
    assert TABLE_4_11_LAYOUTS == list(TABLE_4_11)


def test_uniform_and_hybrid():
    assert layer_kinds("uniform", 6) == ["simple"] * 6
    # Hybrid (§4.4.2): odd layers (1-indexed) simple, even standard; the same as "even".
    assert layer_kinds("hybrid", 6) == ["simple", "standard"] * 3
    assert layer_kinds("hybrid", 24) == layer_kinds("even", 24)


def test_layouts_scale_to_other_depths():
    assert standard_layers("top", 12) == set(range(1, 7))
    assert standard_layers("bottom", 12) == set(range(7, 13))
    assert standard_layers("middle", 12) == {1, 2, 3, 10, 11, 12}
    assert standard_layers("25%", 6) == {4}
    assert standard_layers("bilateral", 28) == {1, 28}


def test_skip_set_is_the_simple_layers_zero_based():
    assert skip_set("hybrid", 6) == {0, 2, 4}
    assert skip_set("uniform", 3) == {0, 1, 2}
    assert skip_set("bilateral", 4) == {1, 2}
    assert check_skip_layers({0, 2}, 4) == frozenset({0, 2})
    with pytest.raises(ConfigError, match="outside"):
        check_skip_layers({5}, 4)


def test_unknown_layout_is_a_config_error():
    with pytest.raises(ConfigError, match="layout='sideways'"):
        layer_kinds("sideways", 24)
    with pytest.raises(ConfigError, match="n_layers"):
        layer_kinds("even", 0)
