"""Attention variants: equivalences (MHE with zero head embeddings == SHA), a hand-written MHA/MHE
reference, padding and causal masks, cross-attention shapes, dropout only in training."""

from __future__ import annotations

import math

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.attention import ATTENTION, build_attention
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import BertEncoder

from attention_modules import D_MODEL, HEAD_DIM, N_HEADS, inputs, make  # noqa: E402  (tests/ is on sys.path)

VARIANTS = ["sha", "mha", "mhe_add", "mhe_mul"]


# psi of §3.3.4, written out here rather than taken from the modules under test.
PSI = {
    "MHEAddAttention": lambda a, e: a + e,          # A + 1 e^T
    "MHEMulAttention": lambda a, e: a * (e + 1.0),  # A ⊙ 1 (e + 1)^T
}


def reference(module, x, memory=None, mask=None, causal=False):
    """Per-head loop, straight from eq. 3.1-3.6, for MHA and MHE (and SHA as n identical slots)."""
    memory = x if memory is None else memory
    q, k, v = module.query(x), module.key(memory), module.value(memory)
    outs = []
    for i in range(module.n_heads):
        if module.query.out_features == module.n_heads * module.head_dim:  # MHA: head i's columns
            cols = slice(i * module.head_dim, (i + 1) * module.head_dim)
            qi, ki, vi = q[..., cols], k[..., cols], v[..., cols]
        elif hasattr(module, "query_head_embeddings"):  # MHE: seed modified by e_i (§3.3.4)
            psi = PSI[type(module).__name__]
            qi = psi(q, module.query_head_embeddings[i])
            ki = psi(k, module.key_head_embeddings[i])
            vi = psi(v, module.value_head_embeddings[i])
        else:  # SHA: the one head in every slot
            qi, ki, vi = q, k, v
        scores = qi @ ki.transpose(-1, -2) / math.sqrt(module.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask.bool()[:, None, :], float("-inf"))
        if causal:
            lq, lk = scores.shape[-2:]
            tri = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
            scores = scores.masked_fill(~tri, float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ vi)
    return module.output(torch.cat(outs, dim=-1))


def copy_seed_weights(src, dst):
    for name in ("query", "key", "value", "output"):
        getattr(dst, name).load_state_dict(getattr(src, name).state_dict())


def test_registry_names_and_unknown_name():
    assert {"sha", "mha", "mhe_add", "mhe_mul"} <= set(ATTENTION.names())
    with pytest.raises(ConfigError, match="unknown attention 'mhe_sub'"):
        build_attention("mhe_sub", d_model=8, n_heads=2, head_dim=4)


@pytest.mark.parametrize("variant", ["mhe_add", "mhe_mul"])
@pytest.mark.parametrize("causal", [False, True])
def test_mhe_with_zero_head_embeddings_equals_sha(variant, causal):
    sha = make("sha", causal=causal)
    mhe = make(variant, causal=causal)
    copy_seed_weights(sha, mhe)
    with torch.no_grad():
        for e in (mhe.query_head_embeddings, mhe.key_head_embeddings, mhe.value_head_embeddings):
            e.zero_()  # ADD: A + 0 = A; MUL: A * (0 + 1) = A
    x = inputs()
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    torch.testing.assert_close(mhe(x, mask), sha(x, mask), atol=1e-6, rtol=0)
    # ...and non-zero head embeddings really make the heads differ from SHA.
    with torch.no_grad():
        mhe.value_head_embeddings.normal_(0, 0.5)
    assert (mhe(x, mask) - sha(x, mask)).abs().max() > 1e-3


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_per_head_reference(variant):
    module = make(variant)
    if variant.startswith("mhe"):
        with torch.no_grad():  # large enough that a wrong psi (add vs mul) shows
            module.query_head_embeddings.normal_(0, 0.5)
            module.key_head_embeddings.normal_(0, 0.5)
            module.value_head_embeddings.normal_(0, 0.5)
    x = inputs()
    torch.testing.assert_close(module(x), reference(module, x), atol=1e-5, rtol=1e-5)


def test_sha_is_one_head_repeated_over_slots():
    sha = make("sha")
    x = inputs()
    one = torch.softmax(sha.query(x) @ sha.key(x).transpose(-1, -2) / math.sqrt(HEAD_DIM), -1)
    one = one @ sha.value(x)
    expected = sha.output(one.repeat(1, 1, N_HEADS))
    torch.testing.assert_close(sha(x), expected, atol=1e-6, rtol=0)
    assert sha.output.weight.shape == (D_MODEL, D_MODEL)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_mask_gives_padded_keys_no_weight(variant):
    module = make(variant)
    x = inputs()
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    out = module(x, mask)
    torch.testing.assert_close(out, reference(module, x, mask=mask), atol=1e-5, rtol=1e-5)
    # Changing what sits at the padded positions changes nothing at the real positions.
    x2 = x.clone()
    x2[1, 3:] = torch.randn(3, D_MODEL) * 10
    out2 = module(x2, mask)
    torch.testing.assert_close(out2[1, :3], out[1, :3], atol=1e-5, rtol=0)
    torch.testing.assert_close(out2[0], out[0], atol=0, rtol=0)
    # Without the mask the padded tokens do take part.
    assert (module(x2)[1, :3] - module(x)[1, :3]).abs().max() > 1e-3


def test_fully_masked_row_is_finite():
    module = make("mha")
    out = module(inputs(), torch.tensor([[0] * 6, [1] * 6]))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_causal_flag(variant):
    module = make(variant, causal=True)
    x = inputs()
    out = module(x)
    torch.testing.assert_close(out, reference(module, x, causal=True), atol=1e-5, rtol=1e-5)
    x2 = x.clone()
    x2[:, 4:] += 5.0  # the future
    out2 = module(x2)
    torch.testing.assert_close(out2[:, :4], out[:, :4], atol=1e-6, rtol=0)
    assert (out2[:, 4:] - out[:, 4:]).abs().max() > 1e-3
    # Causal with a padding mask goes through the explicit-mask path: same answer.
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    torch.testing.assert_close(module(x, mask), reference(module, x, mask=mask, causal=True),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_cross_attention_shapes_and_values(variant):
    module = make(variant)
    x, memory = inputs(length=5), inputs(length=7, seed=2)
    mask = torch.tensor([[1] * 7, [1, 1, 1, 1, 1, 0, 0]])
    out = module(x, mask, kv=memory)
    assert out.shape == (2, 5, D_MODEL)
    torch.testing.assert_close(out, reference(module, x, memory, mask), atol=1e-5, rtol=1e-5)


def test_bad_mask_shape_is_reported():
    with pytest.raises(ValueError, match=r"attention_mask must be \(batch, 6\)"):
        make("mha")(inputs(), torch.ones(2, 5))


def test_dropout_only_in_training():
    module = make("mhe_mul", dropout=0.5)
    x = inputs()
    torch.testing.assert_close(module(x), module(x), atol=0, rtol=0)
    module.train()
    torch.manual_seed(3)
    a = module(x)
    b = module(x)
    assert (a - b).abs().max() > 1e-4


def test_encoder_padding_does_not_leak_into_real_tokens():
    config = ModelConfig.preset("tiny", vocab_size=100, attention="mhe_add")
    torch.manual_seed(0)
    encoder = BertEncoder(config).eval()
    ids = torch.randint(5, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    seq, pooled = encoder(ids, mask)
    ids2 = ids.clone()
    ids2[1, 5:] = 7
    seq2, pooled2 = encoder(ids2, mask)
    assert seq.shape == (2, 8, 64) and pooled.shape == (2, 64)
    torch.testing.assert_close(seq2[1, :5], seq[1, :5], atol=1e-5, rtol=0)
    torch.testing.assert_close(pooled2, pooled, atol=1e-5, rtol=0)
    # A full mask gives the same result as no mask (the encoder drops it for speed).
    torch.testing.assert_close(encoder(ids, torch.ones_like(ids))[0], encoder(ids)[0], atol=0, rtol=0)
