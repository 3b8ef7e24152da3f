"""Which layers of a ch. 4 model keep standard attention (the layer *layout*).

``uniform``: every layer uses the simple variant (``config.attention``). ``hybrid`` (= ``even``,
"50%"): odd layers (1-indexed) simple, even layers standard (§4.4.2). The ablation layouts of §4.6
are defined by Table 4.11 for 24 layers (DESIGN §8: the table governs where §4.6's prose differs,
e.g. "bottom" keeps layers 13-24 standard); for other depths they scale by halves and quarters:

==========  =============================  ======================
layout      standard layers (1-indexed)    24 layers
==========  =============================  ======================
even        even i                         2, 4, ..., 24
odd         odd i                          1, 3, ..., 23
top         first half                     1-12
middle      first and last quarter         1-6, 19-24
bottom      second half                    13-24
25%         every fourth                   4, 8, ..., 24
first       the first                      1
last        the last                       24
bilateral   the first and the last         1, 24
==========  =============================  ======================

``skip`` (Table 4.1's HYBRID SKIP) evaluates a trained model without its simple layers:
:func:`skip_set` gives their 0-based indices for ``QwenForCausalLM(skip_layers=...)``.
"""

from __future__ import annotations

from typing import Callable

from leanlm.errors import ConfigError

STANDARD = "standard"
SIMPLE = "simple"

# 1-indexed standard layers for a model of n layers.
_RULES: dict[str, Callable[[int], set[int]]] = {
    "uniform": lambda n: set(),
    "even": lambda n: set(range(2, n + 1, 2)),
    "odd": lambda n: set(range(1, n + 1, 2)),
    "top": lambda n: set(range(1, n // 2 + 1)),
    "middle": lambda n: set(range(1, n // 4 + 1)) | set(range(n - n // 4 + 1, n + 1)),
    "bottom": lambda n: set(range(n // 2 + 1, n + 1)),
    "25%": lambda n: set(range(4, n + 1, 4)),
    "first": lambda n: {1},
    "last": lambda n: {n},
    "bilateral": lambda n: {1, n},
}
ALIASES = {"hybrid": "even", "50%": "even"}

# Table 4.11's nine configurations, in its order.
TABLE_4_11_LAYOUTS = ["even", "odd", "top", "middle", "bottom", "25%", "first", "last", "bilateral"]
LAYOUTS = sorted(set(_RULES) | set(ALIASES))


def standard_layers(layout: str, n_layers: int) -> set[int]:
    """The 1-indexed layers that keep standard attention (the thesis's numbering)."""
    name = ALIASES.get(layout, layout)
    if name not in _RULES:
        raise ConfigError(f"layout={layout!r} is unknown; known layouts: {', '.join(LAYOUTS)} "
                          "(Table 4.11; 'hybrid' = 'even')")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ConfigError(f"layout {layout!r}: n_layers={n_layers!r} must be a positive integer")
    return _RULES[name](n_layers)


def layer_kinds(layout: str, n_layers: int) -> list[str]:
    """``"standard"`` or ``"simple"`` for each layer, in order (index 0 is the thesis's layer 1)."""
    keep = standard_layers(layout, n_layers)
    return [STANDARD if i + 1 in keep else SIMPLE for i in range(n_layers)]


def skip_set(layout: str, n_layers: int) -> set[int]:
    """0-based indices of the simple layers: what ``skip`` removes from a trained hybrid."""
    return {i for i, kind in enumerate(layer_kinds(layout, n_layers)) if kind == SIMPLE}


def check_skip_layers(skip_layers, n_layers: int) -> frozenset[int]:
    """Validate 0-based layer indices to skip; ConfigError naming the bad ones."""
    layers = frozenset(int(i) for i in skip_layers)
    bad = sorted(i for i in layers if not 0 <= i < n_layers)
    if bad:
        raise ConfigError(f"skip_layers {bad} are outside the model's layers 0..{n_layers - 1} "
                          "(0-based; use layouts.skip_set(layout, n_layers) for a hybrid's simple layers)")
    return layers
