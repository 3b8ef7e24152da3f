"""What the GPU runs of ch. 4's mixers launch, checked on the CPU (the first GPU check's D6/D7,
docs/benchmarks.md "Why Approximate and StaticEmbQK are slow on the H200"): the Taylor kernel's GEMM
operands aligned for tensor cores where asked, with the same results; its backward without the
reversed cumsum's copies; StaticEmbQK's SDPA inputs laid out as Standard's; the operator census."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from leanlm.benchmarks.op_census import census, format_census
from leanlm.modeling.mixers.taylor import taylor_attention
from leanlm.modeling.mixers.taylor_features import aligned, n_features

from mixer_cases import D, context, make

GEMMS = {"bmm", "baddbmm", "mm", "addmm"}


class GemmOperands(TorchDispatchMode):
    """Records, for every GEMM, each operand's (leading stride in bytes, offset in bytes)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in GEMMS:
            for t in args:
                if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-2:] != (1, 1):  # not a bias scalar
                    lead = max(t.stride(-1), t.stride(-2)) if min(t.shape[-2:]) > 1 else t.shape[-1]
                    self.rows.append((lead * t.element_size(), t.storage_offset() * t.element_size(),
                                      tuple(t.shape)))
        return func(*args, **(kwargs or {}))


def _inputs(d, length, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, h = 2, 3
    q, k, v = (torch.randn(b, h, length, d, generator=g, dtype=torch.float64) for _ in range(3))
    va = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    va[0, :, :2] = 0  # padded rows, as the mixer zeroes them
    return [t.to(dtype).requires_grad_() for t in (q, k, va)]


def _run(inputs, chunk, groups, align):
    b, h, _, d = inputs[0].shape
    group_bytes = groups * b * h * chunk * n_features(d) * inputs[0].element_size() * 2
    out, state = taylor_attention(*inputs, chunk, return_state=True, group_bytes=group_bytes,
                                  align_bytes=align)
    g = torch.Generator().manual_seed(1)
    wo = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
    ws = torch.randn(state.shape, generator=g, dtype=torch.float64).to(state.dtype)
    grads = torch.autograd.grad((out * wo).sum() + (state * ws).sum(), inputs)
    return out, state, grads


def test_aligned_widths():
    assert aligned(2145, 2, 16) == 2152 and aligned(65, 2, 16) == 72 and aligned(65, 4, 16) == 68
    assert aligned(2145, 2, 0) == 2145 and aligned(64, 2, 16) == 64 and aligned(65, 8, 16) == 66


@pytest.mark.parametrize("d", [8, 7])
@pytest.mark.parametrize("groups", [1, 99])  # one chunk a group (the CPU's), all in one (the GPU's)
def test_aligned_taylor_gemms_give_the_same_results(d, groups):
    """With 16-byte alignment every GEMM operand of the kernel (forward and hand-written backward)
    has rows and offsets on 16-byte boundaries, where the unpadded widths (F = 45 or 55 features,
    D = d + 1 values) do not (an odd head size d = 7 leaves its own q, k rows as they are: only F and
    D are padded); outputs, final state and gradients equal the unpadded kernel's."""
    # float32: padded GEMMs may block their sums differently, so ~1e-6 of each tensor's scale apart
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        inputs = _inputs(d, 37, dtype)
        plain = GemmOperands()
        with plain:
            want = _run(inputs, 8, groups, align=0)
        assert any(lead % 16 or offset % 16 for lead, offset, _ in plain.rows)
        padded = GemmOperands()
        with padded:
            got = _run(inputs, 8, groups, align=16)
        head_rows = d * inputs[0].element_size()
        bad = [r for r in padded.rows if (r[0] % 16 and r[0] != head_rows) or r[1] % 16]
        assert padded.rows and not bad, bad[:5]
        (out, state, grads), (out0, state0, grads0) = got, want
        assert out.shape == out0.shape and state.shape == state0.shape
        for a, e in zip((out, state, *grads), (out0, state0, *grads0)):
            torch.testing.assert_close(a, e, rtol=tol, atol=tol * e.abs().max().item())


def test_batched_group_backward_makes_no_reversed_copies():
    """The backward of a group of chunks sums the later chunks' gradients in one pass: no flipped
    or shifted copies of the (R, G, F, D) tensor (four extra passes over 1 GB per layer at the 500M
    decoder's micro-batch); its gradients equal the one-chunk-a-group path's."""
    inputs = _inputs(8, 40, torch.float64)
    state_bytes = 2 * 3 * 5 * n_features(8) * 9 * 8  # R x G x F x D in float64

    def step():
        _run(inputs, 8, 99, align=0)
    counted = census(step)
    # What stays: the exclusive prefix of the forward and of the backward's recomputation (one shifted
    # copy each); the old backward added two flips and a third shifted copy.
    copies = sum(counted.by_op[op] for op in ("flip", "constant_pad_nd")
                 if counted.written_by_op[op] >= counted.by_op[op] * state_bytes / 5)
    assert copies == 2 and not counted.by_op["flip"], format_census("taylor backward", counted)
    for a, e in zip(_run(inputs, 8, 99, 0)[2], _run(inputs, 8, 1, 0)[2]):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_static_emb_qk_gives_sdpa_standards_layouts(monkeypatch):
    """Under autocast (the GPU's path) StaticEmbQK hands SDPA q, k, v with exactly Standard's strides
    (v its own (B, heads, L, d_h) tensor), and the same outputs as before the copy."""
    seen = {}
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen[name] = [t.stride() for t in (q, k, v)]
        return sdpa(q, k, v, **kw)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    outs = {}
    for name in ("standard", "static_emb_qk"):
        mixer = make(name).float()
        ctx = context(mixer, 16)
        if ctx.embeddings is not None:
            ctx.embeddings = ctx.embeddings.float()
        ctx.cos, ctx.sin = ctx.cos.float(), ctx.sin.float()
        h = torch.randn(2, 16, D, generator=torch.Generator().manual_seed(3))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs[name] = mixer(h, ctx)
            monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
            plain = mixer.attend(*mixer.qkv(h, ctx.cos, ctx.sin, mixer.qk_source(ctx)), ctx) \
                if name == "standard" else None
            monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
        if plain is not None:
            torch.testing.assert_close(outs[name], plain, rtol=0, atol=0)
    assert seen["static_emb_qk"] == seen["standard"]
    assert seen["static_emb_qk"][2] == (16 * 8 * 4, 16 * 8, 8, 1)


def test_op_census_counts_kernels_bytes_and_flops():
    """A matmul and an add: two kernels (the views in between none), their output bytes, 2 m n k FLOPs."""
    a, b = torch.randn(4, 6), torch.randn(6, 5)

    def step():
        return (a @ b).t().contiguous().view(-1) + 1
    counted = census(step)
    assert counted.by_op == {"mm": 1, "clone": 1, "add": 1}
    assert counted.bytes_written == 3 * 20 * 4 and counted.flops == 2 * 4 * 6 * 5
    assert math.isclose(counted.row()["GB_written"], 240 / 1e9)
