"""Ch. 4's model sizes (Table 4.10) as ModelConfig presets, and the table's parameter counts.

Table 4.10 gives hidden size, intermediate size, layers, max-window layers (Qwen2's sliding-window
setting, unused: no sliding window), attention heads and key/value heads. The rest follows §4.4.2
and Qwen2.5: Pythia's 50K BPE vocabulary (50,304 embedding rows), head dim = hidden / heads (64;
128 for the Qwen3-style 1.7B, which also has q/k RMSNorm and no QKV bias), RoPE base 10^6,
RMSNorm eps 1e-6, no dropout, sequences of 2048 tokens (the fixed Q/K sequence's length), MHA
(KV heads = heads) so that every variant has exactly the same parameters.

The thesis does not say whether input and output embeddings are tied. They are untied here, as
``transformers``' Qwen2Config defaults to (the released Qwen2.5-0.5B and Qwen3-1.7B checkpoints tie
theirs). Neither choice matches every size name: untied totals are 77M, 191M, 481M and 1.73B, tied
ones 51M, 152M, 436M and 1.63B, so untied is closer for 70M, 500M and 1.7B and tied for 160M.
``qwen_config(..., tie_word_embeddings=True)`` ties them (docs/design-notes.md, Chapter 4).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig

PYTHIA_VOCAB = 50304

# Table 4.10, column by column.
TABLE_4_10: dict[str, dict[str, int]] = {
    "70M": dict(hidden=512, intermediate=2048, layers=6, max_window_layers=6, heads=8, kv_heads=8),
    "160M": dict(hidden=768, intermediate=3072, layers=12, max_window_layers=12, heads=12, kv_heads=12),
    "500M": dict(hidden=896, intermediate=4864, layers=24, max_window_layers=24, heads=14, kv_heads=14),
    "1.7B": dict(hidden=2048, intermediate=6144, layers=28, max_window_layers=28, heads=16, kv_heads=16),
}
QWEN3_SIZES = {"1.7B"}  # Qwen3-1.7B-Base architecture: q/k norm, head dim 128

# How closely the variants' counts must agree. The thesis matches them "strictly"; only the MLP
# variant cannot be exact, since its width is an integer: 3 d w is within 1.5 d of the attention's
# parameters in each simple layer.
MLP_TOLERANCE_PER_LAYER = 1.5  # x d_model


def qwen_config(size: str, attention: str = "standard", layout: str = "uniform",
                **overrides: Any) -> ModelConfig:
    """The ModelConfig of a Table 4.10 size with a given variant and layout (fields overridable)."""
    if size not in TABLE_4_10:
        raise ConfigError(f"unknown ch. 4 model size {size!r}; Table 4.10 has {', '.join(TABLE_4_10)}")
    row = TABLE_4_10[size]
    qwen3 = size in QWEN3_SIZES
    fields = dict(
        backbone="qwen", vocab_size=PYTHIA_VOCAB, n_layers=row["layers"], d_model=row["hidden"],
        n_heads=row["heads"], n_kv_heads=row["kv_heads"],
        head_dim=128 if qwen3 else row["hidden"] // row["heads"],
        d_ff=row["intermediate"], max_position=2048, type_vocab_size=0, dropout=0.0,
        attention_dropout=0.0, layer_norm_eps=1e-6, rope_theta=1_000_000.0, qk_norm=qwen3,
        pad_token_id=1, tie_word_embeddings=False, attention=attention, layout=layout,
    )
    return ModelConfig.from_dict({**fields, **overrides}, where=f"ch. 4 size {size!r}")


def count_parameters(config: ModelConfig) -> int:
    """Parameters of the causal LM built on the meta device (shapes only; tied tensors once; padded
    vocabulary rows not counted: leanlm.modeling.vocab)."""
    from leanlm.modeling.counting import total_parameters
    from leanlm.modeling.models import build_model

    with torch.device("meta"):
        model = build_model(config, "causal_lm")
    return total_parameters(model)


def table_4_10_rows(variants: list[str] | None = None, layout: str = "uniform",
                    sizes: list[str] | None = None) -> pd.DataFrame:
    """One row per size: Table 4.10's fields and the parameter count of each variant (counted from
    instantiated models), plus the largest relative difference between variants."""
    from leanlm.modeling.mixers import CH4_VARIANTS

    variants = variants or CH4_VARIANTS
    rows = []
    for size in sizes or list(TABLE_4_10):
        counts = {v: count_parameters(qwen_config(size, v, layout)) for v in variants}
        spread = (max(counts.values()) - min(counts.values())) / counts[variants[0]]
        rows.append({"size": size, **TABLE_4_10[size], **{f"params_{v}": c for v, c in counts.items()},
                     "max_rel_diff": spread})
    return pd.DataFrame(rows)
