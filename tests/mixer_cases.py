"""Shared cases for the ch. 4 token-mixer tests (test_mixers.py, test_taylor.py): a small Qwen config,
mixers built in float64, and the context (RoPE tables, embeddings or a fixed q/k) each variant reads."""

import torch

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.mixers import MixerContext, build_mixer
from leanlm.modeling.mixers.base import apply_rope, rope_tables

D, HEADS, DH = 32, 4, 8
DECODING = ["standard", "mlp", "approximate", "approximate_per_term", "non_approximate",
            "rnd_emb_qk", "fixed_seq_qk", "static_emb_qk"]


def config(name="standard", kv=0, **kw):
    return ModelConfig(backbone="qwen", vocab_size=64, n_layers=2, d_model=D, n_heads=HEADS,
                       head_dim=DH, d_ff=64, max_position=256, type_vocab_size=0, dropout=0.0,
                       attention_dropout=0.0, layer_norm_eps=1e-6, attention=name, n_kv_heads=kv, **kw)


def make(name, kv=0, seed=0, **kw):
    torch.manual_seed(seed)
    return build_mixer(name, config(name, kv, **kw)).double()


def context(mixer, length, batch=2, seed=1, fixed_len=None):
    """RoPE tables and, per variant, embeddings or a cached fixed (q, k)."""
    g = torch.Generator().manual_seed(seed)
    cos, sin = rope_tables(torch.arange(length), DH, mixer.rope_theta, torch.float64)
    ctx = MixerContext(cos=cos, sin=sin)
    if mixer.qk_stream == "embeddings":
        ctx.embeddings = torch.randn(batch, length, D, generator=g, dtype=torch.float64)
    elif mixer.qk_stream in ("random", "text"):
        n = fixed_len or length
        c, s = rope_tables(torch.arange(n), DH, mixer.rope_theta, torch.float64)
        x = torch.randn(1, n, D, generator=g, dtype=torch.float64)
        ctx.fixed_qk = {0: (apply_rope(mixer.project_q(x), c, s), apply_rope(mixer.project_k(x), c, s))}
    return ctx
