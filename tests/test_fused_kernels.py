"""The kernels the models run (issue 23): fewer, larger ops, the same numbers.

- RMSNorm is torch's ``F.rms_norm`` (one fused kernel on CUDA; the same ops on a CPU), computing exactly
  Qwen's formula ``w * (x_32 / rms(x_32)).to(dtype)`` in every dtype, gradients included;
- Q, K and V of a self-attention come from one GEMM (the three weights concatenated at the call; the
  parameters, state_dict keys and checkpoints stay ``q_proj``/``k_proj``/``v_proj``, ``query``/``key``/
  ``value``), for every ch. 3 attention and ch. 4 mixer whose Q, K and V read the same input, with the
  outputs of three separate projections;
- RoPE runs in the compute dtype: under bf16 autocast the rotated queries and keys are bf16 (they were
  promoted to float32 by float32 tables), and without autocast the tables are the input's dtype, so
  float32 and float64 results are what they were.

Timing is not asserted here (docs/benchmarks.md has the measurements).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from leanlm.modeling.attention import ATTENTION, build_attention
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.mixers import MIXERS, MixerContext, RMSNorm, build_mixer
from leanlm.modeling.mixers.base import apply_rope, rope_tables
from leanlm.modeling.models import build_model

D, HEADS, DH, LENGTH = 32, 4, 8, 12


def qwen_config(attention="standard", **kw) -> ModelConfig:
    return ModelConfig(backbone="qwen", vocab_size=64, n_layers=2, d_model=D, n_heads=HEADS, head_dim=DH,
                       d_ff=48, max_position=32, type_vocab_size=0, dropout=0.0, attention_dropout=0.0,
                       layer_norm_eps=1e-6, attention=attention, **kw)


@contextlib.contextmanager
def counting(module, name: str):
    """Count the calls of ``module.name`` (still calling it) while the block runs."""
    real, calls = getattr(module, name), []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    setattr(module, name, spy)
    try:
        yield calls
    finally:
        setattr(module, name, real)


# ----------------------------------------------------------------------------------------- RMSNorm
def qwen_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen2's RMSNorm as transformers writes it: in float32, rounded back, then scaled."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


@pytest.mark.parametrize("x_dtype, w_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                              (torch.bfloat16, torch.bfloat16), (torch.float64, torch.float64)])
def test_rms_norm_is_torchs_kernel_with_qwens_numbers(x_dtype, w_dtype):
    torch.manual_seed(0)
    norm = RMSNorm(24, eps=1e-6).to(w_dtype)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(24))
    x = (3 * torch.randn(2, 5, 24)).to(x_dtype).requires_grad_()
    with counting(F, "rms_norm") as calls:
        out = norm(x)
    assert len(calls) == 1
    reference_x = x.detach().clone().requires_grad_()
    reference_w = norm.weight.detach().clone().requires_grad_()
    expected = qwen_rms_norm(reference_x, reference_w, 1e-6)
    assert out.dtype == expected.dtype and torch.equal(out, expected)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    (out * cotangent).sum().backward()
    (expected * cotangent).sum().backward()
    assert torch.equal(x.grad, reference_x.grad) and torch.equal(norm.weight.grad, reference_w.grad)


# -------------------------------------------------------------------------------------- fused QKV
def _gemms(fn) -> int:
    """How many GEMMs (F.linear calls) ``fn()`` runs."""
    with counting(F, "linear") as calls:
        fn()
    return len(calls)


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _assert_same(got, want):
    """Joint and separate projections: the same dot products, so the same numbers (float32's
    tolerance, or bf16's where autocast rounds the outputs)."""
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        tolerance = 1e-6 if a.dtype == torch.float32 else 1e-2
        torch.testing.assert_close(a, b, rtol=tolerance, atol=tolerance)


CH3_JOINT = {"mha": ("query", "key", "value"), "sha": ("query", "key", "value"), "mqa": ("query", "key", "value"),
             "mhe_add": ("query", "key", "value"), "mhe_mul": ("query", "key", "value"), "skv": ("query", "key_value"),
             "gqa": ("query", "key", "value")}


@pytest.mark.parametrize("name", sorted(CH3_JOINT))
def test_ch3_self_attention_projects_qkv_in_one_gemm(name):
    """Under autocast (the GPU's eager path) a self-attention's projections are one GEMM, plus the
    output projection; cross-attention (keys and values from another input) keeps a GEMM per input, and
    so does plain float32 (no stacked weight copy to save: joint_linear's docstring)."""
    torch.manual_seed(0)
    attention = build_attention(name, d_model=D, n_heads=HEADS, head_dim=DH, causal=False).eval()
    x, memory = torch.randn(2, LENGTH, D), torch.randn(2, 7, D)
    apart = len(CH3_JOINT[name]) + 1
    with bf16_autocast():
        assert _gemms(lambda: attention(x)) == 2
        assert _gemms(lambda: attention(x, kv=memory)) == apart
        together = attention.project(x, x)
        separate = attention.project(x, x.clone())  # another tensor object: the cross-attention path
    assert _gemms(lambda: attention(x)) == apart
    _assert_same(together, separate)
    assert {"query.weight", "output.weight"} <= set(attention.state_dict())  # the parameters are unchanged


def test_every_ch3_attention_is_covered():
    """Each registered ch. 3 attention either projects jointly (above) or has fewer than two projections
    of one input to join (EL-ATT: queries only; FNet, Linear: no projections)."""
    assert set(ATTENTION.names()) == set(CH3_JOINT) | {"el_att", "fnet", "linear"}


CH4_JOINT = {"standard", "approximate", "approximate_per_term", "non_approximate"}


@pytest.mark.parametrize("qk_norm", [False, True], ids=["qwen2", "qk_norm"])
@pytest.mark.parametrize("kv", [0, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("name", sorted(CH4_JOINT))
def test_ch4_mixers_project_qkv_in_one_gemm(name, kv, qk_norm):
    torch.manual_seed(0)
    mixer = build_mixer(name, qwen_config(name, n_kv_heads=kv, qk_norm=qk_norm)).eval()
    if qk_norm:
        with torch.no_grad():
            mixer.q_norm.weight.uniform_(0.5, 1.5)
            mixer.k_norm.weight.uniform_(0.5, 1.5)
    h = torch.randn(2, LENGTH, D)
    cos, sin = rope_tables(torch.arange(LENGTH), DH, mixer.rope_theta)
    ctx = MixerContext(cos=cos, sin=sin)
    with bf16_autocast():
        assert _gemms(lambda: mixer(h, ctx)) == 2  # Q, K, V together, then W^O
        _assert_same(mixer.project_qkv(h), (mixer.project_q(h), mixer.project_k(h), mixer.project_v(h)))
    assert _gemms(lambda: mixer(h, ctx)) == 4  # float32: separately, as before
    _assert_same(mixer.project_qkv(h), (mixer.project_q(h), mixer.project_k(h), mixer.project_v(h)))


def test_standard_saves_no_view_of_the_joint_projection():
    """SDPA saves v for the backward; a view of the joint GEMM's output would keep all of it alive (the
    pre-RoPE q and k too). Under autocast, the tensors saved for the backward hold no more memory than
    with three separate projections."""
    torch.manual_seed(0)
    mixer = build_mixer("standard", qwen_config()).train()
    h = torch.randn(2, LENGTH, D, requires_grad=True)
    cos, sin = rope_tables(torch.arange(LENGTH), DH, mixer.rope_theta, torch.bfloat16)

    def saved_bytes(joined: bool) -> int:
        storages = {}

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), bf16_autocast():
            if joined:
                mixer(h, MixerContext(cos=cos, sin=sin))
            else:
                q, k = mixer.project_q(h), mixer.project_k(h)
                v = mixer.project_v(h)
                mixer.attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, MixerContext(cos=cos, sin=sin))
        return sum(storages.values())

    assert saved_bytes(joined=True) <= saved_bytes(joined=False)


def test_every_ch4_mixer_is_covered():
    """Each registered mixer projects jointly (above) or reads Q, K from another input than V (the fixed
    stream, the embeddings) or has no Q, K, V at all (MLP)."""
    assert set(MIXERS.names()) == CH4_JOINT | {"rnd_emb_qk", "fixed_seq_qk", "static_emb_qk", "mlp"}


# ------------------------------------------------------------------------------------------- RoPE
def test_rope_runs_in_bf16_under_autocast_and_as_before_without():
    """The rotated queries and keys reach SDPA in bf16 under autocast (float32 tables promoted them to
    float32 before, whose traffic the GPU paid for; SDPA then cast them back), in float32 without."""
    torch.manual_seed(0)
    model = build_model(qwen_config(), "causal_lm").train()
    ids = torch.randint(0, 64, (2, LENGTH), generator=torch.Generator().manual_seed(1))
    with counting(F, "scaled_dot_product_attention") as calls:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, labels=ids)["loss"].backward()
    assert len(calls) == 2 and all([t.dtype for t in args[:3]] == [torch.bfloat16] * 3 for args, _ in calls)
    with counting(F, "scaled_dot_product_attention") as calls:
        model(input_ids=ids)
    assert len(calls) == 2 and all([t.dtype for t in args[:3]] == [torch.float32] * 3 for args, _ in calls)
    cos, _ = rope_tables(torch.arange(4), DH, 1e4, torch.float64)
    assert cos.dtype == torch.float64  # tables in the dtype asked for (float64 tests keep theirs)
