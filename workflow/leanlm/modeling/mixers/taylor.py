"""The Approximate mixer's kernel: exact causal second-order Taylor attention in linear time.

The feature map phi with phi(q) . phi(k) = 1 + s + s^2/2 (s = q.k / sqrt(d_h)), n (n + 1) / 2 features for
n = d_h + 1 (2,145 at d_h = 64), and its backward are in :mod:`leanlm.modeling.mixers.taylor_features`.

:func:`taylor_attention` is the chunked causal form: inside each chunk of C tokens, pairwise
weights computed directly from q.k (C x C, all chunks in one batch; cheap); earlier chunks enter
through the running state sum phi(k) v^T, read by each chunk's queries. Chunks are processed in
groups whose feature tensors fit a memory budget (one group on GPUs; on CPUs one chunk at a time
keeps the big temporaries in cache), with the state carried between groups. The tokens x features
temporaries of every group have the same shapes, so they live in buffers reused group after group
(:class:`Buffers`): on a CPU, a fresh multi-megabyte tensor per op costs page faults that took
longer than the op's arithmetic (a product into a fresh tensor measured 4x slower than into a
reused one). On GPUs the feature count and the value width are padded with zero columns to 16-byte rows
(:data:`ALIGN_BYTES`), so that the GEMMs can use tensor-core kernels; the padding adds exact zeros.

Training uses a hand-written backward (:class:`TaylorChunks`): it saves q, k, v and the state at the
start of each group (not the tokens x features tensors, which it rebuilds group by group), so
activation memory is O(L d) plus one state per group, not O(L d_h^2), and no forward is recomputed.
Per chunk it costs the forward's two state GEMMs twice (d/d features of q and k, d/d state and
d/d v), plus the feature map's own backward (:func:`features_backward`).

Dtypes: the kernel runs in one dtype, :func:`compute_dtype` (the state sums in float32 at least),
with autocast off. Under bf16 autocast the mixer can hand it q and k in float32 and v in bf16 (RoPE's
tables were float32 and promoted the bf16 projections; they are bf16 under autocast now, but q/k
RMSNorms, whose float32 weight promotes as Qwen3's does, still give float32 q and k); autocast then
ran the forward's GEMMs in bf16 whatever their inputs, but the hand-written backward runs outside
autocast, so a GEMM there met a bf16 and a float32 operand and failed ("expected scalar type Float but
found BFloat16", issue 23). :func:`taylor_attention` and :func:`taylor_step` therefore cast q, k, v to
autocast's dtype (the precision autocast gives every other mixer's GEMMs) before the kernel, and the
casts' own backward returns each input's gradient in that input's dtype. Without autocast the inputs'
common dtype is used: float32 runs compute exactly what they did before.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from leanlm.modeling.mixers.base import autocast_enabled, autocast_off
from leanlm.modeling.mixers.taylor_features import Buffers, aligned, features_backward, n_features, taylor_features

# Bytes one group's feature tensor may take: on CPUs one chunk per group (any budget below one
# chunk's features), which measured fastest; elsewhere everything in one batched group.
GROUP_BYTES = {"cpu": 0, "default": 2**30}

# Row alignment, in bytes, of the GEMM operands whose widths are the feature count F (2,145 at d_h = 64)
# and the value width D (d_h + 1 with the normaliser's column): both odd, so a bf16 row of either starts
# at a 2-byte boundary, which rules out the GPU's tensor-core GEMM kernels that load 16-byte vectors
# (Hopper's TMA kernels need 16-byte aligned strides). Where set, F and D are padded with zero columns
# to a multiple of it: zero features and zero value columns add exact zeros to every sum, and are sliced
# off the results. Not on CPUs (their GEMMs load any stride, and their results stay bit for bit as they were).
ALIGN_BYTES = {"cpu": 0, "default": 16}

def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The one dtype the kernel computes in for these inputs: autocast's where autocast is on for
    their device (what it would run each GEMM in; float64 inputs excepted, as autocast leaves them),
    else the inputs' common dtype."""
    common = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
    device = tensors[0].device.type
    if common != torch.float64 and autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return common


def _accumulate(carry: torch.Tensor | None, fk: torch.Tensor, v: torch.Tensor,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """carry + fk^T v (batched), kept in float32 at least, written into ``out`` when given (which
    may be ``carry`` itself: an in-place update)."""
    acc = torch.promote_types(v.dtype, torch.float32)
    if carry is not None and carry.dtype != v.dtype:  # a float32 state for bf16 inputs
        total = carry + torch.bmm(fk.transpose(1, 2), v)
        return total if out is None else out.copy_(total)
    if out is None:
        return (torch.bmm(fk.transpose(1, 2), v).to(acc) if carry is None
                else torch.baddbmm(carry, fk.transpose(1, 2), v))
    if carry is None:
        return torch.bmm(fk.transpose(1, 2), v, out=out) if acc == v.dtype else \
            out.copy_(torch.bmm(fk.transpose(1, 2), v))
    if out is carry:
        return carry.baddbmm_(fk.transpose(1, 2), v)
    return torch.baddbmm(carry, fk.transpose(1, 2), v, out=out)


def _features(buffers: Buffers, *xs: torch.Tensor | None) -> list[torch.Tensor | None]:
    """taylor_features of each x given (None: not needed), in one batched call for two: fewer,
    larger kernels (on a shared CPU each kernel's thread barrier can cost far more than its maths).
    The results live in ``buffers`` until the next call."""
    present = [x for x in xs if x is not None]
    stacked = torch.stack(present)
    count = n_features(stacked.size(-1))
    width = buffers.feature_width or count
    if width == count:
        full = out = buffers.empty("features", (*stacked.shape[:-1], count), stacked)
    else:  # zero padding columns (a few of each row: cheaper than zeroing the buffer)
        full = buffers.empty("features", (*stacked.shape[:-1], width), stacked)
        full[..., count:].zero_()
        out = full[..., :count]
    features = taylor_features(stacked, out=out)
    if features is out:
        features = full
    elif width > count:  # compiled: a new tensor, padded here
        features = F.pad(features, (0, width - count))
    found = iter(features.unbind(0))
    return [None if x is None else next(found) for x in xs]


def _intra(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Inside every chunk at once ((R', C, .) each): sum_{j<=i} (1 + s + s^2/2) v_j, with
    1 + s + s^2/2 = t^2/2 + 1/2 for t = 1 + s."""
    t = torch.baddbmm(q.new_ones(1, 1, 1), q, k.transpose(1, 2))
    return torch.bmm(torch.addcmul(q.new_full((1, 1, 1), 0.5), t, t, value=0.5).tril_(), v)


def _intra_backward(q, k, v, dout):
    """(dq, dk, dv) of :func:`_intra`."""
    t = torch.baddbmm(q.new_ones(1, 1, 1), q, k.transpose(1, 2))
    pairs = torch.addcmul(q.new_full((1, 1, 1), 0.5), t, t, value=0.5).tril_()
    dt = torch.bmm(dout, v.transpose(1, 2)).tril_().mul_(t)           # d(t^2/2)/dt = t
    return torch.bmm(dt, k), torch.bmm(dt.transpose(1, 2), q), torch.bmm(pairs.transpose(1, 2), dout)


def _prefixes(fk: torch.Tensor, v: torch.Tensor, carry: torch.Tensor | None, rows: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """For a group of G > 1 chunks (fk (R G, C, F), v (R G, C, D)): the state before each chunk
    (R G, F, D) and the inclusive sums (R, G, F, D). A shifted cumsum, not cumsum - S: no
    cancellation."""
    states = torch.bmm(fk.transpose(1, 2), v).view(rows, -1, fk.size(-1), v.size(-1))
    inclusive = states.cumsum(1, dtype=torch.promote_types(states.dtype, torch.float32))
    before = F.pad(inclusive[:, :-1], (0, 0, 0, 0, 1, 0))
    if carry is not None:
        before = before + carry[:, None]
    return before.reshape(-1, *before.shape[2:]), inclusive


def _inter(q, k, v, carry, build_state: bool, into: torch.Tensor | None, buffers: Buffers):
    """Earlier chunks' part of a group's outputs: q, k (R, G, C, d) (scaled; R = batch x heads),
    v (R, G, C, D), carry (R, F, D) the state of every earlier chunk (None: none). Returns (the
    part (R, G, C, D) or None, the state after the group or None when not ``build_state``);
    ``into``: where to write that state (the carry itself: updated in place; None: a new tensor)."""
    rows, groups, c, _ = q.shape
    q3, k3, v3 = (t.reshape(rows * groups, c, t.size(-1)) for t in (q, k, v))
    several = groups > 1
    reads, builds = carry is not None or several, build_state or several
    if not (reads or builds):
        return None, None
    fq, fk = _features(buffers, q3 if reads else None, k3 if builds else None)
    part, new_carry = None, None
    if not several:  # read the state, then add this chunk to it
        if carry is not None:
            part = torch.bmm(fq, carry.to(q.dtype))
        if build_state:
            new_carry = _accumulate(carry, fk, v3, into)
    else:
        before, inclusive = _prefixes(fk, v3, carry, rows)
        part = torch.bmm(fq, before.to(q.dtype))
        if build_state:
            new_carry = inclusive[:, -1] if carry is None else carry + inclusive[:, -1]
            if into is not None:
                new_carry = into.copy_(new_carry)
    return (None if part is None else part.view(rows, groups, c, -1)), new_carry


def _suffix_sums(dbefore: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For d(state before chunk g) (R, G, F, D): what each chunk's own state reached, the sum over
    the later chunks g' > g (zero for the last), and the sum over all G (what the carry in reached).

    Written chunk by chunk into one tensor, each sum the previous plus one term, the order a scan
    (CUDA's cumsum over an outer dimension) adds them in: the reversed cumsum it replaces went through
    two flipped copies and a shifted (padded) copy, four more passes over a tensor that is 1 GB at
    the 500M decoder's micro-batch (docs/benchmarks.md)."""
    groups = dbefore.size(1)
    later = torch.empty_like(dbefore)
    later[:, -1].zero_()
    compiling = torch.compiler.is_compiling()
    for g in range(groups - 2, -1, -1):
        if compiling:  # dynamo refuses out= into a non-contiguous slice (later[:, g] when R > 1): a graph break
            later[:, g] = later[:, g + 1] + dbefore[:, g + 1]
        else:  # eager: the sum written in place, no temporary
            torch.add(later[:, g + 1], dbefore[:, g + 1], out=later[:, g])
    return later, later[:, 0] + dbefore[:, 0]


def _inter_backward(q, k, v, carry, dout, dcarry, buffers: Buffers):
    """Gradients through :func:`_inter` (shapes as there): (dq, dk, dv) to add (each or None) and
    the gradient of the carry entering the group, given d out and the gradient of the state after
    the group (None: it reached nothing). ``dcarry`` is this call's to update in place when its
    dtype allows (the caller owns it)."""
    rows, groups, c, _ = q.shape
    q3, k3, v3, do3 = (t.reshape(rows * groups, c, t.size(-1)) for t in (q, k, v, dout))
    dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    several = groups > 1
    reads = carry is not None or several
    if not reads and dcarry is None:
        return None, None, None, None
    fq, fk = _features(buffers, q3 if reads else None, k3 if dcarry is not None or several else None)
    before = _prefixes(fk, v3, carry, rows)[0] if several else carry
    # What each chunk's fk^T v reached: the carry out and, in a group, later chunks' prefixes.
    if not several:
        dstate = dcarry
    else:
        dbefore = torch.bmm(fq.transpose(1, 2), do3).to(acc)
        dstate, dcarry_in = _suffix_sums(dbefore.view(rows, groups, *dbefore.shape[1:]))
        if dcarry is not None:
            dstate, dcarry_in = dstate + dcarry[:, None], dcarry_in + dcarry
        dstate = dstate.reshape(rows * groups, *dstate.shape[2:])
    # d features of q (reads) and of k (states), written side by side, through the feature map
    # in one call.
    count = int(reads) + int(dstate is not None)
    count_f = n_features(q.size(-1))
    grads = buffers.empty("features_grad", (count, rows * groups, c, buffers.feature_width or count_f), q3)
    xs = []
    if reads:
        torch.bmm(do3, before.to(dtype).transpose(1, 2), out=grads[len(xs)])
        xs.append(q3)
    if dstate is not None:
        dstate = dstate.to(dtype)
        torch.bmm(v3, dstate.transpose(1, 2), out=grads[len(xs)])
        xs.append(k3)
    # The padding columns' gradients (of features that are constant zeros) are not passed on.
    dxs = list(features_backward(grads[..., :count_f], torch.stack(xs), buffers).unbind(0))
    dq = dxs.pop(0) if reads else None
    dk = dxs.pop(0) if dstate is not None else None
    dv = None if dstate is None else torch.bmm(fk, dstate)
    if not several:  # the carry entering the chunk also reached this chunk's reads
        if not reads:
            dcarry_in = dcarry
        elif dcarry is None:
            dcarry_in = torch.bmm(fq.transpose(1, 2), do3).to(acc)
        elif dcarry.dtype == dtype:
            dcarry_in = dcarry.baddbmm_(fq.transpose(1, 2), do3)
        else:
            dcarry_in = dcarry + torch.bmm(fq.transpose(1, 2), do3)
    shape = (rows, groups, c, -1)
    return (*(None if t is None else t.view(shape) for t in (dq, dk, dv)), dcarry_in)


def _forward(q, k, v, group, return_state, keep_carries, width):
    """Every chunk's outputs (R, N, C, D), the final state (or None) and the carry entering each
    group (kept for backward: then never updated in place). ``width``: the feature tensors' row width."""
    rows, n, c, _ = q.shape
    flat = [t.reshape(rows * n, c, t.size(-1)) for t in (q, k, v)]
    out = _intra(*flat).view(rows, n, c, -1)
    carry, carries, buffers = None, [], Buffers(width)
    for start in range(0, n, group):  # a loop over groups of chunks, each one batched
        part = slice(start, start + group)
        carries.append(carry)
        # The state is needed by later chunks of this group, later groups, or the caller. Kept
        # states are separate tensors, one a group: the allocator reuses their memory step after
        # step, where one tensor for all of them would be fresh pages each step (measured 5x the
        # cost of writing them).
        build = return_state or start + group < n
        into = None if keep_carries else carry
        inter, carry = _inter(q[:, part], k[:, part], v[:, part], carry, build, into, buffers)
        if inter is not None:
            out[:, part] += inter
    return out, (carry if return_state else None), carries


class TaylorChunks(torch.autograd.Function):
    """The chunked form with its hand-written backward. Inputs: q, k (R, N, C, d) scaled, v (R, N,
    C, D), the group size, whether to return the final state too, and the feature tensors' width."""

    @staticmethod
    def forward(ctx, q, k, v, group, return_state, width):
        out, state, carries = _forward(q, k, v, group, return_state, keep_carries=True, width=width)
        ctx.group, ctx.device_type, ctx.width = group, q.device.type, width
        ctx.save_for_backward(q, k, v, *carries[1:])
        ctx.set_materialize_grads(False)
        return (out, state) if return_state else out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, dstate=None):
        # In the saved tensors' dtype even when backward() is called inside an autocast region.
        with autocast_off(ctx.device_type):
            return TaylorChunks._backward(ctx, dout, dstate)

    @staticmethod
    def _backward(ctx, dout, dstate):
        q, k, v, *carries = ctx.saved_tensors
        carries = [None, *carries]
        rows, n, c, _ = q.shape
        if dout is None:
            dout = torch.zeros(rows, n, c, v.size(-1), dtype=v.dtype, device=v.device)
        flat = [t.reshape(rows * n, c, t.size(-1)) for t in (q, k, v, dout)]
        dq, dk, dv = (t.view(rows, n, c, -1) for t in _intra_backward(*flat))
        # Ours to accumulate into in place (autograd's gradient is not).
        dcarry = None if dstate is None else dstate.clone()
        buffers = Buffers(ctx.width)
        for index in reversed(range(len(carries))):
            part = slice(index * ctx.group, (index + 1) * ctx.group)
            *adds, dcarry = _inter_backward(q[:, part], k[:, part], v[:, part], carries[index],
                                            dout[:, part], dcarry, buffers)
            for grad, add in zip((dq, dk, dv), adds):
                if add is not None:
                    grad[:, part] += add
        return dq, dk, dv, None, None, None


def taylor_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = 128,
                     return_state: bool = False, group_bytes: int | None = None,
                     align_bytes: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """sum_{j<=i} (1 + s_ij + s_ij^2/2) v_j with s_ij = q_i.k_j / sqrt(d_h), for every i.

    q, k (B, H, L, d_h), v (B, H, L, D) -> (B, H, L, D); a zero row of v contributes nothing (how
    padding is excluded; a last column of ones accumulates the normaliser). With ``return_state``
    also the state sum_j phi(k_j / d_h^(1/4)) v_j^T (B, H, F, D) over all L tokens (float32 at
    least), which :func:`taylor_step` continues. Time and memory are linear in L. Computed in
    :func:`compute_dtype` with autocast off (module docstring); the output is in that dtype.
    ``group_bytes`` and ``align_bytes`` default to the device's :data:`GROUP_BYTES` and
    :data:`ALIGN_BYTES`; neither changes the result beyond float rounding.
    """
    dtype = compute_dtype(q, k, v)
    with autocast_off(q.device.type):
        return _taylor_attention(q.to(dtype), k.to(dtype), v.to(dtype), chunk, return_state, group_bytes,
                                 align_bytes)


def _taylor_attention(q, k, v, chunk, return_state, group_bytes, align_bytes):
    b, heads, length, d = q.shape
    if align_bytes is None:
        align_bytes = ALIGN_BYTES.get(q.device.type, ALIGN_BYTES["default"])
    features, value_width = n_features(d), v.size(-1)
    width = aligned(features, q.element_size(), align_bytes)
    padded_width = aligned(value_width, v.element_size(), align_bytes)
    if padded_width > value_width:  # zero columns: zero outputs and state columns, sliced off below
        v = F.pad(v, (0, padded_width - value_width))
    scale = d ** -0.25
    q, k = q * scale, k * scale
    c = min(chunk, length)
    pad = (-length) % c
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    n = (length + pad) // c
    qc, kc, vc = (t.reshape(b * heads, n, c, t.size(-1)) for t in (q, k, v))
    if group_bytes is None:
        group_bytes = GROUP_BYTES.get(q.device.type, GROUP_BYTES["default"])
    group = max(1, group_bytes // (b * heads * c * width * q.element_size()))
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        result = TaylorChunks.apply(qc, kc, vc, group, return_state, width)
        out, state = result if return_state else (result, None)
    else:
        out, state, _ = _forward(qc, kc, vc, group, return_state, keep_carries=False, width=width)
    if state is not None:
        state = state.view(b, heads, *state.shape[1:])
        if (width, padded_width) != (features, value_width):
            state = state[..., :features, :value_width].contiguous()
    out = out.reshape(b, heads, n * c, -1)[:, :, :length]
    return (out if padded_width == value_width else out[..., :value_width]), state


def taylor_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrent form, one token: q, k (B, H, 1, d_h), v (B, H, 1, D), state (B, H, F, D) or
    None (empty) -> (output (B, H, 1, D), new state; the given one is not modified). The same sums
    as :func:`taylor_attention`, in the same dtype."""
    dtype = compute_dtype(q, k, v)
    with autocast_off(q.device.type):
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        d = q.size(-1)
        fk = taylor_features(k * d ** -0.25)
        update = (fk.transpose(-1, -2) @ v).to(torch.promote_types(v.dtype, torch.float32))
        state = update if state is None else state + update
        return taylor_features(q * d ** -0.25) @ state.to(q.dtype), state
