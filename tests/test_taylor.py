"""Approximate's fast Taylor kernel (mixers/taylor.py, its feature map in mixers/taylor_features.py): features and their gradient, chunked forms, padding, bf16, the mixer bench (split from test_mixers.py)."""

import math

import pytest
import torch

from leanlm.modeling.mixers import MixerContext

from mixer_cases import D, context, make


# ------------------------------------------------- Approximate's fast kernel (mixers/taylor.py)
from leanlm.benchmarks import mixers as bench  # noqa: E402
from leanlm.modeling.mixers.linear import causal_linear_attention  # noqa: E402
from leanlm.modeling.mixers.taylor import taylor_attention, taylor_step  # noqa: E402
from leanlm.modeling.mixers.taylor_features import (  # noqa: E402
    Buffers,
    features_backward,
    n_features,
    taylor_features,
)


def based_feature_map(x):
    """The previous kernel's map (Based): [1, x/d^(1/4), vec(x x^T)/sqrt(2d)], 1 + d + d^2 wide."""
    dh = x.size(-1)
    second = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2 * dh)
    return torch.cat([torch.ones_like(x[..., :1]), x / dh ** 0.25, second], dim=-1)


def based_form(q, k, v, chunk):
    """The previous parallel form: Based's full features in the shared chunked linear form."""
    def pair(a, b):
        s = a @ b.transpose(-1, -2) / math.sqrt(a.size(-1))
        return 1 + s + s * s / 2
    return causal_linear_attention(q, k, v, based_feature_map, pair, chunk)


@pytest.mark.parametrize("d", [64, 8, 7])
def test_symmetric_features_give_the_taylor_kernel(d):
    """phi(q).phi(k) = 1 + s + s^2/2 = Based's phi(q).phi(k), with (d+1)(d+2)/2 features
    (2,145 at d_h = 64 instead of Based's 4,161); odd d gets a zero entry (one more row).
    Writing into a given tensor gives the same features."""
    assert n_features(64) == 2145 and len(based_feature_map(torch.zeros(64))) == 4161
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 2, 5, d, generator=g, dtype=torch.float64)
    n = d + 1 + d % 2
    assert taylor_features(a).shape[-1] == n_features(d) == n * (n + 1) // 2
    s = (a * b).sum(-1) / math.sqrt(d)
    fa = torch.full((2, 5, n_features(d)), float("nan"), dtype=torch.float64)
    assert taylor_features(a / d ** 0.25, out=fa) is fa
    got = (fa * taylor_features(b / d ** 0.25)).sum(-1)
    torch.testing.assert_close(got, 1 + s + s * s / 2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, (based_feature_map(a) * based_feature_map(b)).sum(-1),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("d", [8, 7])
def test_features_backward_is_the_gradient_of_the_features(d):
    x = torch.randn(3, 4, d, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 4, n_features(d), dtype=torch.float64)
    expected, = torch.autograd.grad((taylor_features(x) * grad).sum(), x)
    torch.testing.assert_close(features_backward(grad, x.detach()), expected, rtol=1e-12, atol=1e-12)
    # Reused buffers (as the kernel passes them, chunk after chunk) give the same gradient.
    buffers = Buffers()
    for _ in range(2):
        got = features_backward(grad, x.detach(), buffers)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("length,chunk,groups,d", [
    (37, 8, 1, 8),   # several chunks, the last one partial, one chunk per group
    (40, 8, 99, 8),  # an exact multiple, every chunk in one batched group
    (40, 8, 3, 8),   # groups of 3 chunks, the last group shorter
    (5, 8, 1, 8),    # shorter than a chunk
    (8, 8, 1, 8),    # exactly one chunk
    (9, 8, 2, 8),    # one token past a chunk boundary
    (21, 4, 2, 7),   # odd head size (a zero entry in the features)
])
def test_taylor_attention_equals_the_previous_forms(length, chunk, groups, d):
    """float64: the new chunked kernel = the old Based-feature form = the quadratic definition,
    values and gradients (the hand-written backward), with zero (padded) rows of v at the start
    and in the middle; its final state equals the directly summed one."""
    g = torch.Generator().manual_seed(length)
    b, h = 2, 3
    q, k, v = (torch.randn(b, h, length, d, generator=g, dtype=torch.float64) for _ in range(3))
    keep = torch.ones(b, 1, length, 1, dtype=torch.float64)
    keep[0, :, :2] = 0
    keep[1, :, length // 2] = 0
    va = torch.cat([v, torch.ones_like(v[..., :1])], -1) * keep
    q, k, va = (t.requires_grad_() for t in (q, k, va))
    group_bytes = groups * b * h * chunk * n_features(d) * 8
    got, state = taylor_attention(q, k, va, chunk, return_state=True, group_bytes=group_bytes)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    direct = (1 + s + s * s / 2).tril() @ va
    torch.testing.assert_close(got, direct, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, based_form(q, k, va, chunk), rtol=1e-12, atol=1e-12)
    summed = taylor_features(k / d ** 0.25).transpose(-1, -2) @ va
    torch.testing.assert_close(state, summed, rtol=1e-12, atol=1e-12)
    # The hand-written backward, through the outputs and the returned state.
    wo = torch.linspace(-1, 1, d + 1, dtype=torch.float64)
    ws = torch.randn(state.shape[-2:], generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((got * wo).sum() + (state * ws).sum(), (q, k, va))
    want = torch.autograd.grad((direct * wo).sum() + (summed * ws).sum(), (q, k, va))
    for a, e in zip(grads, want):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-10)
    # The recurrent form continues from that state.
    q1, k1, v1 = (torch.randn(b, h, 1, d, generator=g, dtype=torch.float64) for _ in range(3))
    v1 = torch.cat([v1, torch.ones_like(v1[..., :1])], -1)
    step, _ = taylor_step(q1, k1, v1, state)
    full, _ = taylor_attention(torch.cat([q, q1], 2), torch.cat([k, k1], 2),
                               torch.cat([va, v1], 2), chunk)
    torch.testing.assert_close(step, full[:, :, -1:], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [4, 16, 128])
def test_approximate_recurrent_equals_parallel_across_chunk_boundaries(chunk):
    """Prefill 50 then step to 75 tokens with chunks of 4/16 (many boundaries, a partial last
    chunk) and 128 (one chunk): the same outputs as one forward, which does not depend on C."""
    mixer = make("approximate", kv=2).eval()
    mixer.chunk_size = chunk
    length, prompt = 75, 50
    h = torch.randn(2, length, D, dtype=torch.float64)
    ctx = context(mixer, length)
    full = mixer(h, ctx)
    head = MixerContext(cos=ctx.cos[:prompt], sin=ctx.sin[:prompt])
    out, state = mixer.prefill(h[:, :prompt], head)
    outs = [out]
    for t in range(prompt, length):
        y, state = mixer.step(h[:, t], state)
        outs.append(y[:, None])
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-10, atol=1e-10)
    mixer.chunk_size = 64
    torch.testing.assert_close(mixer(h, ctx), full, rtol=1e-10, atol=1e-10)


def test_approximate_left_padding_gives_zeros_not_nans():
    """Rows before the first real token have no key to average (0/0): they come out 0, and
    gradients stay finite, so padding cannot poison later layers."""
    mixer = make("approximate")
    mixer.chunk_size = 8
    pad, length = 11, 30
    h = torch.randn(2, pad + length, D, dtype=torch.float64, requires_grad=True)
    ctx = context(mixer, pad + length)
    ctx.attention_mask = torch.cat([torch.zeros(2, pad), torch.ones(2, length)], 1).long()
    out = mixer(h, ctx)
    assert out.isfinite().all()
    torch.testing.assert_close(out[:, :pad], torch.zeros_like(out[:, :pad]))
    out.square().sum().backward()
    assert h.grad.isfinite().all()


def test_mixer_bench_reports_throughput_relative_to_standard_and_mfu(capsys):
    """Tiny sizes: every variant gets tokens/s and its ratio to Standard (1 for Standard itself);
    MFU when a peak is known (given here; from the GPU's name on CUDA), n/a otherwise."""
    rows = bench.main(["--d-model", "32", "--heads", "4", "--length", "32", "--long-length", "48",
                       "--repeats", "1", "--device", "cpu", "--peak-tflops", "1",
                       "--variants", "approximate", "mlp", "--long-variants", "approximate"])
    assert [(r["variant"], r["length"]) for r in rows] == [
        ("standard", 32), ("approximate", 32), ("mlp", 32), ("standard", 48), ("approximate", 48)]
    for r in rows:
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1
        assert r["relative"] == pytest.approx(r["tokens_per_s"] / next(
            s["tokens_per_s"] for s in rows if s["variant"] == "standard" and s["length"] == r["length"]))
    assert rows[0]["relative"] == 1.0
    printed = capsys.readouterr().out
    assert "tokens/s" in printed and "MFU" in printed and "approximate" in printed
    plain = bench.run(32, 4, 1, 32, 48, "cpu", False, 1, None, ["mlp"], ["standard"])
    assert all(r["mfu"] is None for r in plain) and "n/a" in bench.format_rows(plain)


@pytest.mark.parametrize("groups", ["one chunk a group (CPU)", "all chunks in one group (GPU)"])
def test_taylor_attention_in_bfloat16_keeps_a_float32_state(groups):
    """The GPU dtype: bf16 inputs, outputs and gradients within bf16 rounding of the float64
    definition, with the running state summed in float32 (mixed-dtype paths of both group modes)."""
    g = torch.Generator().manual_seed(5)
    length, d = 300, 16
    q, k = (0.5 * torch.randn(1, 2, length, d, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 2, length, d + 1, generator=g, dtype=torch.float64)
    exact = [t.clone().requires_grad_() for t in (q, k, v)]
    s = exact[0] @ exact[1].transpose(-1, -2) / math.sqrt(d)
    (1 + s + s * s / 2).tril().matmul(exact[2]).sum().backward()
    half = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    group_bytes = 0 if groups.startswith("one") else 2**30
    out, state = taylor_attention(*half, 64, return_state=True, group_bytes=group_bytes)
    out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
    want = (1 + s + s * s / 2).tril() @ exact[2]
    for got, ref in ((out, want), *((a.grad, e.grad) for a, e in zip(half, exact))):
        assert ((got.double() - ref).norm() / ref.norm()).item() < 2e-2


