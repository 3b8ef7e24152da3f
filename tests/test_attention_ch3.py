"""Chapter 3's remaining attention variants: EL-ATT, MQA, SKV (softmax) and the FNet / Linear token
mixers. Counts against Tables 3.1, 3.3, 3.4 and 3.13; real weight sharing; a per-head reference;
padding, causal and cross use; FNet against a hand-computed DFT; gradients."""

from __future__ import annotations

import math

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.attention import ATTENTION, DEFAULT_MAX_LEN, build_attention
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import attention_block_memory, attention_parameters, qkv_parameters
from leanlm.modeling.encoder import BertEncoder

from attention_modules import D_MODEL, HEAD_DIM, N_HEADS, inputs, make  # noqa: E402  (tests/ is on sys.path)

SOFTMAX = ["el_att", "mqa", "skv"]
MIXERS = ["fnet", "linear"]
CAUSAL = ["el_att", "mqa", "skv", "linear"]


def on_meta(name: str, n: int, d: int, **kw):
    with torch.device("meta"):
        return build_attention(name, d_model=n * d, n_heads=n, head_dim=d, **kw)


# ----------------------------------------------------------------------------- counts
# Table 3.4, written out here independently of the variants' own formulas (W^O excluded).
TABLE_3_4 = {
    "el_att": lambda n, d: d * d * n * n,
    "mqa": lambda n, d: d * d * n * n + 2 * d * d * n,
    "skv": lambda n, d: 2 * d * d * n * n,
}
PRINTED_3_4 = {  # (complexity, #params, #params(+)) as Table 3.4 prints them
    "el_att": (r"$\mathcal{O}(n^2)$", "$d^2n^2$", "$(n^2 - 3n)d^2$"),
    "mqa": (r"$\mathcal{O}(n^2)$", "$d^2n^2 + 2d^2n$", "$(n^2 - n)d^2$"),
    "skv": (r"$\mathcal{O}(n^2)$", "$2d^2n^2$", "$(2n^2 - 3n)d^2$"),
}


@pytest.mark.parametrize("n,d", [(1, 8), (4, 16), (12, 64)])
@pytest.mark.parametrize("name", SOFTMAX)
def test_counts_equal_table_3_4(name, n, d):
    module = on_meta(name, n, d)
    assert qkv_parameters(module) == TABLE_3_4[name](n, d)
    assert type(module).qkv_parameter_formula(n, d) == TABLE_3_4[name](n, d)
    # The block adds exactly the d_m x d_m output projection.
    assert attention_parameters(module) == TABLE_3_4[name](n, d) + (n * d) ** 2


@pytest.mark.parametrize("name", SOFTMAX)
def test_latex_is_table_3_4_as_printed(name):
    cls = ATTENTION.get(name)
    assert (cls.complexity, cls.params_latex, cls.params_extra_latex) == PRINTED_3_4[name]


@pytest.mark.parametrize("n,d", [(1, 8), (4, 16), (12, 64)])
def test_token_mixer_counts(n, d):
    fnet = on_meta("fnet", n, d)
    assert attention_parameters(fnet) == 0 and list(fnet.parameters()) == []
    assert type(fnet).qkv_parameter_formula(n, d) == 0
    linear = on_meta("linear", n, d, max_len=64)
    # W_seq (max_len^2) in the Q/K/V place; W_hidden (d_m^2) in W^O's place.
    assert qkv_parameters(linear) == 64 * 64
    assert attention_parameters(linear) == 64 * 64 + (n * d) ** 2
    assert type(linear).qkv_parameter_formula(n, d, 64) == 64 * 64
    assert type(linear).qkv_parameter_formula(n, d) == DEFAULT_MAX_LEN ** 2 == 512 * 512


# Table 3.13 as printed, per BERT-base attention block (bytes).
TABLE_3_13 = {
    "el_att": (7077888, 7077888, 9437184, 25165824, 48758784),
    "mqa": (7667712, 7667712, 10223616, 25165824, 50724864),
    "skv": (10616832, 10616832, 14155776, 25165824, 60555264),
}


@pytest.mark.parametrize("name", SOFTMAX)
def test_table_3_13_per_block_at_bert_base(name):
    weights = attention_parameters(on_meta(name, 12, 64))
    assert weights == {"el_att": 1_179_648, "mqa": 1_277_952, "skv": 1_769_472}[name]
    memory = attention_block_memory(weights, 32, 512, 768)
    assert tuple(memory[c] for c in ("weights", "gradients", "adam_states", "activations", "total")) \
        == TABLE_3_13[name]


@pytest.mark.parametrize("name,encoder_only,encoder_decoder", [
    ("el_att", "14.16M", "9.44M"), ("mqa", "15.34M", "10.62M"), ("skv", "21.23M", "14.16M"),
])
def test_table_3_1_and_3_3_totals(name, encoder_only, encoder_decoder):
    # Table 3.1: 12 BERT-base blocks. Table 3.3: 6 encoder + 6 decoder layers at d_m=512, 8 heads
    # of 64; each decoder layer has self- and cross-attention, so 18 blocks.
    bert = 12 * attention_parameters(on_meta(name, 12, 64))
    wmt = 18 * attention_parameters(on_meta(name, 8, 64))
    assert f"{bert / 1e6:.2f}M" == encoder_only
    assert f"{wmt / 1e6:.2f}M" == encoder_decoder


# ----------------------------------------------------------------------------- sharing
def test_el_att_has_no_key_or_value_weights():
    module = make("el_att")
    names = {n for n, _ in module.named_parameters()}
    assert names == {"query.weight", "query.bias", "output.weight", "output.bias"}
    memory = inputs(length=7)
    _, k, v = module.project(inputs(), memory)
    # Keys and values are the input itself, split into heads: a view, not a projection or a copy.
    assert k is v and k.data_ptr() == memory.data_ptr()
    torch.testing.assert_close(k.transpose(1, 2).reshape(2, 7, D_MODEL), memory, atol=0, rtol=0)


def test_el_att_needs_d_model_equal_to_heads_times_head_dim():
    # The fix it offers is a width that works: 32 // 4 = 8, written as the integer head_dim must be.
    with pytest.raises(ConfigError, match=r"d_model == n_heads \* head_dim; set head_dim to 8 or change n_heads"):
        build_attention("el_att", d_model=32, n_heads=4, head_dim=16)


def test_mqa_one_key_and_one_value_head_broadcast_without_copies(monkeypatch):
    module = make("mqa")
    assert module.key.weight.shape == (HEAD_DIM, D_MODEL)
    assert module.value.weight.shape == (HEAD_DIM, D_MODEL)
    q, k, v = module.project(inputs(), inputs())
    assert (q.size(1), k.size(1), v.size(1)) == (N_HEADS, 1, 1)
    seen = {}
    real_sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.update(k=k, v=v)
        return real_sdpa(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    module(inputs())
    for t in (seen["k"], seen["v"]):  # n heads that are one head's memory: stride 0 along heads
        assert t.size(1) == N_HEADS and t.stride(1) == 0


def test_skv_keys_and_values_are_one_projection():
    module = make("skv")
    names = {n for n, _ in module.named_parameters() if n.endswith("weight")}
    assert names == {"query.weight", "key_value.weight", "output.weight"}
    _, k, v = module.project(inputs(), inputs(length=7))
    assert k is v and k.size(1) == N_HEADS


# ----------------------------------------------------------------------------- behaviour
def per_head(module, x, memory):
    """The variant's per-head Q_i, K_i, V_i (lists of (B, L, d_h)), written from §3.4.1's definitions."""
    cols = [slice(i * HEAD_DIM, (i + 1) * HEAD_DIM) for i in range(N_HEADS)]
    q = module.query(x)
    if type(module).__name__ == "ELAttention":
        k = v = memory  # the input as keys and values
        return [q[..., c] for c in cols], [k[..., c] for c in cols], [v[..., c] for c in cols]
    if type(module).__name__ == "MQAttention":
        k, v = module.key(memory), module.value(memory)  # one head for all
        return [q[..., c] for c in cols], [k] * N_HEADS, [v] * N_HEADS
    kv = module.key_value(memory)  # SKV
    return [q[..., c] for c in cols], [kv[..., c] for c in cols], [kv[..., c] for c in cols]


def reference(module, x, memory=None, mask=None, causal=False):
    memory = x if memory is None else memory
    qs, ks, vs = per_head(module, x, memory)
    outs = []
    for qi, ki, vi in zip(qs, ks, vs):
        scores = qi @ ki.transpose(-1, -2) / math.sqrt(HEAD_DIM)
        if mask is not None:
            scores = scores.masked_fill(~mask.bool()[:, None, :], float("-inf"))
        if causal:
            lq, lk = scores.shape[-2:]
            scores = scores.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq), float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ vi)
    return module.output(torch.cat(outs, dim=-1))


@pytest.mark.parametrize("name", SOFTMAX)
def test_matches_per_head_reference(name):
    module = make(name)
    x = inputs()
    torch.testing.assert_close(module(x), reference(module, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", SOFTMAX)
def test_cross_attention(name):
    module = make(name)
    x, memory = inputs(length=5), inputs(length=7, seed=2)
    mask = torch.tensor([[1] * 7, [1, 1, 1, 1, 1, 0, 0]])
    out = module(x, mask, kv=memory)
    assert out.shape == (2, 5, D_MODEL)
    torch.testing.assert_close(out, reference(module, x, memory, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", MIXERS)
def test_token_mixers_refuse_cross_attention(name):
    module = make(name)
    assert type(module).supports_cross is False
    with pytest.raises(ConfigError, match="no cross-attention form"):
        module(inputs(length=5), kv=inputs(length=7))
    module(inputs(), kv=None)  # self-mixing is fine


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_outputs_ignore_the_future(name):
    module = make(name, causal=True)
    x = inputs()
    out = module(x)
    x2 = x.clone()
    x2[:, 4:] += 5.0
    out2 = module(x2)
    torch.testing.assert_close(out2[:, :4], out[:, :4], atol=1e-6, rtol=0)
    assert (out2[:, 4:] - out[:, 4:]).abs().max() > 1e-3
    # ...while the non-causal module does let the future in.
    free = make(name)
    assert (free(x2)[:, :4] - free(x)[:, :4]).abs().max() > 1e-3
    if name in SOFTMAX:  # with a padding mask too (the explicit-mask path)
        mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
        torch.testing.assert_close(module(x, mask), reference(module, x, mask=mask, causal=True),
                                   atol=1e-5, rtol=1e-5)


def test_fnet_has_no_causal_form():
    assert ATTENTION.get("fnet").supports_causal is False
    with pytest.raises(ConfigError, match="'fnet' has no causal form"):
        build_attention("fnet", d_model=D_MODEL, n_heads=N_HEADS, head_dim=HEAD_DIM, causal=True)


@pytest.mark.parametrize("name", SOFTMAX + MIXERS)
def test_padding_is_honoured(name):
    module = make(name)
    x = inputs()
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    out = module(x, mask)
    x2 = x.clone()
    x2[1, 3:] = torch.randn(3, D_MODEL) * 10
    out2 = module(x2, mask)
    torch.testing.assert_close(out2[1, :3], out[1, :3], atol=1e-5, rtol=0)
    torch.testing.assert_close(out2[0], out[0], atol=0, rtol=0)
    assert (module(x2)[1, :3] - module(x)[1, :3]).abs().max() > 1e-3  # unmasked, they do count
    if name in SOFTMAX:
        torch.testing.assert_close(out, reference(module, x, mask=mask), atol=1e-5, rtol=1e-5)


def test_fnet_is_the_real_part_of_the_2d_dft():
    # 2x2 by hand: the 2-point DFT is [[1, 1], [1, -1]] along both axes (all real).
    fnet = build_attention("fnet", d_model=2, n_heads=1, head_dim=2, max_len=None)
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    expected = torch.tensor([[[10.0, -2.0], [-4.0, 0.0]]])
    torch.testing.assert_close(fnet(x), expected, atol=1e-6, rtol=0)
    # In general, fft2(x).real over the sequence and hidden dimensions...
    fnet = make("fnet", max_len=None)
    x = inputs()
    torch.testing.assert_close(fnet(x), torch.fft.fft2(x).real, atol=1e-5, rtol=0)
    torch.testing.assert_close(make("fnet", max_len=6)(x), torch.fft.fft2(x).real, atol=1e-5, rtol=0)


def test_fnet_pads_the_sequence_transform_to_max_len():
    # A 16-point DFT along the sequence (the first 6 outputs), a 32-point one along the hidden size.
    x = inputs()
    k = torch.arange(6, dtype=torch.float64)
    seq = torch.polar(torch.ones(6, 6, dtype=torch.float64), -2 * math.pi * k[:, None] * k[None, :] / 16)
    kh = torch.arange(D_MODEL, dtype=torch.float64)
    hidden = torch.polar(torch.ones(D_MODEL, D_MODEL, dtype=torch.float64),
                         -2 * math.pi * kh[:, None] * kh[None, :] / D_MODEL)
    expected = (seq @ x.to(torch.complex128) @ hidden).real.float()
    torch.testing.assert_close(make("fnet", max_len=16)(x), expected, atol=1e-4, rtol=0)
    # So one sentence gets the same output however long its batch's padding is.
    fnet = make("fnet", max_len=16)
    longer = torch.cat([x, torch.randn(2, 4, D_MODEL)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4] * 2)
    torch.testing.assert_close(fnet(longer, mask)[:, :6], fnet(x), atol=1e-4, rtol=0)


def test_linear_mixing_is_w_seq_x_w_hidden():
    module = make("linear", max_len=10)
    x = inputs()
    w_seq = module.sequence_mixing[:6, :6]
    expected = w_seq @ x @ module.output.weight.T + module.output.bias
    torch.testing.assert_close(module(x), expected, atol=1e-5, rtol=1e-5)
    # The top-left block == mixing the sequence zero-padded to max_len and keeping the first L.
    padded = torch.cat([x, torch.zeros(2, 4, D_MODEL)], dim=1)
    torch.testing.assert_close(module(padded)[:, :6], module(x), atol=1e-5, rtol=0)
    causal = make("linear", max_len=10, causal=True)
    torch.testing.assert_close(causal(x), w_seq.tril() @ x @ causal.output.weight.T + causal.output.bias,
                               atol=1e-5, rtol=1e-5)


def test_linear_max_len_sizes_the_sequence_matrix():
    assert make("linear").sequence_mixing.shape == (DEFAULT_MAX_LEN, DEFAULT_MAX_LEN)
    module = make("linear", max_len=4)
    assert module.sequence_mixing.shape == (4, 4)
    with pytest.raises(ValueError, match="longer than max_len=4"):
        module(inputs())
    with pytest.raises(ConfigError, match="max_len=0 must be a positive integer"):
        make("linear", max_len=0)


@pytest.mark.parametrize("name", SOFTMAX + MIXERS)
def test_gradients_flow(name):
    module = make(name).train()
    x = inputs().requires_grad_(True)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    module(x, mask).pow(2).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in module.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", SOFTMAX + MIXERS)
def test_encoder_builds_and_runs_with_each_variant(name):
    config = ModelConfig.preset("tiny", vocab_size=100, attention=name)
    torch.manual_seed(0)
    encoder = BertEncoder(config).eval()
    ids = torch.randint(5, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    seq, _ = encoder(ids, mask)
    assert seq.shape == (2, 8, 64) and torch.isfinite(seq).all()
