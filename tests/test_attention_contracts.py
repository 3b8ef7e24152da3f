"""What every registered attention variant promises beyond its formula (the :class:`Attention` and
:class:`TokenMixing` skeletons): constructor checks and defaults, the causal mask aligned to the end
over cached keys, masks made in the input's dtype and on its device, and the token mixers' checks of
their input. Found missing by mutation testing (docs/mutation-testing.md)."""

from __future__ import annotations

import re

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.attention import ATTENTION, build_attention

from attention_modules import D_MODEL, HEAD_DIM, N_HEADS, inputs, make  # noqa: E402  (tests/ is on sys.path)

SOFTMAX = ["sha", "mha", "mhe_add", "mhe_mul", "el_att", "mqa", "skv"]
MIXERS = ["fnet", "linear"]
CLASS = {name: ATTENTION.get(name).__name__ for name in SOFTMAX + MIXERS}


def _build(name, **kw):
    return build_attention(name, **{"d_model": D_MODEL, "n_heads": N_HEADS, "head_dim": HEAD_DIM, **kw})


# ----------------------------------------------------------------------------- construction
@pytest.mark.parametrize("name", SOFTMAX + MIXERS)
def test_defaults_are_bidirectional_without_dropout(name):
    module = _build(name)
    assert module.causal is False and module.dropout == 0.0 and module.bias is True


@pytest.mark.parametrize("name", SOFTMAX + ["linear"])
def test_bias_setting_reaches_every_projection(name):
    """Projections have biases unless the caller says ``bias=False`` (BERT's and GPT-2's have them); the
    setting reaches every projection, W^O (Linear mixing's W_hidden) included, and changes the count only
    by those biases."""
    def linears(module):
        found = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
        assert found, name
        return found

    default, plain = _build(name), _build(name, bias=False)
    assert all(m.bias is not None for m in linears(default))
    assert all(m.bias is None for m in linears(plain))
    biases = sum(m.bias.numel() for m in linears(default))
    assert sum(p.numel() for p in default.parameters()) - sum(p.numel() for p in plain.parameters()) == biases


@pytest.mark.parametrize("name", SOFTMAX + MIXERS)
@pytest.mark.parametrize("field,value", [("d_model", 0), ("n_heads", 0), ("head_dim", -8), ("n_heads", 2.5)])
def test_widths_must_be_positive_integers(name, field, value):
    message = f"{CLASS[name]}: {field}={value!r} must be a positive integer"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _build(name, **{field: value})


@pytest.mark.parametrize("name", SOFTMAX + MIXERS)
@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5])
def test_dropout_must_be_a_probability_below_one(name, dropout):
    message = f"{CLASS[name]}: dropout={dropout!r} must be in [0, 1)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _build(name, dropout=dropout)


# ----------------------------------------------------------------------------- masks
@pytest.mark.parametrize("name", SOFTMAX)
@pytest.mark.parametrize("padded", [False, True])
def test_causal_mask_is_aligned_to_the_end_over_cached_keys(name, padded):
    """Queries for the last tokens over all the keys (a decoder over its cache): query i sees keys
    j <= i + L_kv - L_q, so the outputs are the last rows of self-attention over the whole sequence."""
    module = make(name, causal=True)
    x = inputs(length=7)
    mask = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]]) if padded else None
    torch.testing.assert_close(module(x[:, -3:], mask, kv=x), module(x, mask)[:, -3:], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", SOFTMAX)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_padding_and_causal_masks_take_the_inputs_dtype(name, dtype):
    """The additive mask is built in the queries' dtype, so its most negative value is that dtype's (a
    float32 mask cannot hold float64's, and would be another dtype than the kernels expect); the
    result agrees with float32 to the precision of the dtype."""
    module, x = make(name, causal=True), inputs(length=6)
    padding = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    expected = module(x, padding)
    module = module.to(dtype)
    for mask_in, kv_len in ((padding, 6), (None, 8)):  # padding; causal over more keys than queries
        bias, _ = module.attention_bias(mask_in, 6, kv_len, x.to(dtype))
        assert bias.dtype == dtype and bias.min() == torch.finfo(dtype).min
    got = module(x.to(dtype), padding)
    assert got.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float64 else 5e-2
    torch.testing.assert_close(got.float(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name", SOFTMAX + ["linear"])
def test_masks_are_made_on_the_inputs_device(name):
    """Masks the module creates itself must be on its input's device: with no GPU here, the meta device
    stands in (mixing it with a CPU tensor is an error, as with CUDA)."""
    module = make(name, causal=True).to("meta")
    x = torch.empty(2, 6, D_MODEL, device="meta")
    mask = torch.ones(2, 6, dtype=torch.long, device="meta")
    for out in (module(x), module(x, mask), module(x[:, -2:], kv=x) if name != "linear" else module(x)):
        assert out.device.type == "meta" and out.shape[-1] == D_MODEL


# ----------------------------------------------------------------------------- token mixers
@pytest.mark.parametrize("name", MIXERS)
def test_token_mixer_max_len_is_a_positive_integer(name):
    assert _build(name, max_len=1).max_len == 1  # one position is a valid (if small) model
    for bad in (0, 2.5, True):
        message = f"attention '{name}': max_len={bad!r} must be a positive integer"
        with pytest.raises(ConfigError, match=re.escape(message)):
            _build(name, max_len=bad)


@pytest.mark.parametrize("name", MIXERS)
def test_token_mixer_refuses_a_longer_sequence_or_a_wrong_mask(name):
    module = make(name, max_len=8)
    with pytest.raises(ValueError, match=rf"^{CLASS[name]}: sequence of 9 tokens is longer than max_len=8; "):
        module(inputs(length=9))
    for mask in (torch.ones(2, 5), torch.ones(2, 6, 1), torch.ones(3, 6)):
        expected = (f"attention_mask must be (batch, 6) with 1 for tokens and 0 for padding, "
                    f"got shape {tuple(mask.shape)}")
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            module(inputs(length=6), mask)


@pytest.mark.parametrize("name", MIXERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_token_mixers_keep_the_inputs_dtype(name, dtype):
    """FNet transforms in float32 and casts back; a float32 padding mask must not promote the input."""
    module = make(name).to(dtype)
    mask = torch.tensor([[1.0] * 6, [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]])
    assert module(inputs(length=6).to(dtype), mask).dtype == dtype
    assert module(inputs(length=6).to(dtype)).dtype == dtype


def test_linear_mixing_needs_max_len():
    with pytest.raises(ConfigError, match=r"^attention 'linear' needs max_len \(the model's longest input\) to size "
                                          r"its sequence-mixing matrix; pass max_len=config\.max_tokens$"):
        _build("linear", max_len=None)


def test_linear_mixing_matrix_starts_as_bert_init():
    """W_seq is drawn from N(0, 0.02^2), BERT's initialiser (the model's init covers only nn.Linear):
    262,144 draws put the sample mean within 2e-4 and the standard deviation within 1e-4 of those."""
    torch.manual_seed(0)
    weights = _build("linear").sequence_mixing.detach().double()
    assert weights.shape == (512, 512)
    assert abs(weights.mean().item()) < 2e-4
    assert abs(weights.std().item() - 0.02) < 1e-4
