"""Two checks mutation testing found missing (issue 16), each of which would silently change results:

- MHE's head embeddings start as N(0, initializer_range) (§3.3.4: heads begin as small perturbations of
  SHA); a mean of 1.0 passed every other test;
- Non-approximate's captured attention map (the ch. 4 indicators, Figures 4.1, 4.7, 4.8) is the map its
  output is made with, eq. 4.18's a_ij = e^{s_j} / sum_{j'<=i} e^{s_j'}; a softmax over the wrong axis
  passed every other test.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from leanlm.modeling.attention import build_attention
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.mixers import MixerContext, build_mixer
from leanlm.modeling.mixers.base import repeat_kv
from leanlm.modeling.models import build_model

EMBEDDINGS = ("query_head_embeddings", "key_head_embeddings", "value_head_embeddings")


def _assert_normal(values: torch.Tensor, std: float) -> None:
    """Mean 0 and standard deviation ``std``, to within 5 standard errors of n draws."""
    n = values.numel()
    assert abs(float(values.mean())) < 5 * std / math.sqrt(n)
    assert float(values.std()) == pytest.approx(std, rel=5 / math.sqrt(2 * n))


@pytest.mark.parametrize("name", ["mhe_add", "mhe_mul"])
def test_mhe_head_embeddings_start_as_small_zero_mean_noise(name):
    torch.manual_seed(0)
    attention = build_attention(name, d_model=64, n_heads=32, head_dim=64)
    for field in EMBEDDINGS:
        _assert_normal(getattr(attention, field).detach(), 0.02)


@pytest.mark.parametrize("name", ["mhe_add", "mhe_mul"])
def test_mhe_in_a_model_follows_the_initializer_range(name):
    torch.manual_seed(0)
    config = ModelConfig.from_dict({"vocab_size": 50, "d_model": 64, "n_layers": 2, "n_heads": 32, "head_dim": 64,
                                    "d_ff": 32, "max_position": 16, "attention": name, "initializer_range": 0.05})
    model = build_model(config, "mlm")
    found = [p.detach() for key, p in model.named_parameters() if key.rsplit(".", 1)[-1] in EMBEDDINGS]
    assert len(found) == 2 * 3
    _assert_normal(torch.cat([p.flatten() for p in found]), 0.05)
    # So each head starts near SHA: MHE-MUL's factors (e + 1) are close to 1, MHE-ADD's shifts close to 0.
    attention = next(m for m in model.modules() if hasattr(m, "query_head_embeddings"))
    seed = torch.randn(1, 1, 4, 64)
    heads = attention.psi(seed, attention.query_head_embeddings[None, :, None, :].detach())
    assert (heads - seed).abs().max() < 0.5 * seed.abs().max()


D, HEADS, DH = 32, 4, 8


def _non_approximate(kv_heads: int = 0):
    torch.manual_seed(0)
    config = ModelConfig(backbone="qwen", vocab_size=64, n_layers=1, d_model=D, n_heads=HEADS, head_dim=DH,
                         d_ff=64, max_position=256, type_vocab_size=0, dropout=0.0, attention_dropout=0.0,
                         layer_norm_eps=1e-6, attention="non_approximate", n_kv_heads=kv_heads)
    return build_mixer("non_approximate", config).double()


@pytest.mark.parametrize("kv_heads", [0, 2])
def test_non_approximate_captured_map_is_eq_4_18(kv_heads):
    mixer = _non_approximate(kv_heads)
    length = 70  # more than one chunk of the parallel form
    h = torch.randn(2, length, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ctx = MixerContext(capture={})
    out = mixer(h, ctx)
    probs, logits = ctx.capture[0]["probs"], ctx.capture[0]["logits"]
    assert probs.shape == logits.shape == (2, HEADS, length, length)

    # The map, from the definition: token j's self-gated score s_j, weights over j <= i only.
    q = F.silu(mixer.project_q(h))
    k = repeat_kv(mixer.project_k(h), HEADS)
    s = (q * k).sum(-1) / math.sqrt(DH)  # (B, n, L)
    expected = torch.zeros(2, HEADS, length, length, dtype=torch.float64)
    for i in range(length):
        expected[:, :, i, : i + 1] = torch.softmax(s[:, :, : i + 1], dim=-1)
    torch.testing.assert_close(probs.double(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, HEADS, length, dtype=probs.dtype))
    torch.testing.assert_close(logits[:, :, 5, :], s)  # every row sees the same scores

    # And it is the map the output is made with.
    v = repeat_kv(mixer.project_v(h), HEADS)
    torch.testing.assert_close(out, mixer.merge(probs.double() @ v), rtol=1e-5, atol=1e-6)
