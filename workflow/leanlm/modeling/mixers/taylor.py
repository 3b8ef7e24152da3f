"""The Approximate mixer's kernel: exact causal second-order Taylor attention in linear time.

For s = q.k / sqrt(d_h) the Taylor weight 1 + s + s^2/2 is a dot product of feature maps. Based's
map [1, x, vec(x x^T)/sqrt(2)] has 1 + d_h + d_h^2 features (4,161 at d_h = 64), but x x^T is
symmetric, so each product x_a x_b (a < b) is needed once, counted twice. Appending a constant 1
to x folds the degree-0 and degree-1 terms into the same products: with x~ = [x / d_h^(1/4), 1],

    1 + s + s^2/2 = 1/2 (q~ . k~)^2 + 1/2
                  = sum_a w_a q~_a^2 k~_a^2 + sum_{a<b} (q~_a q~_b)(k~_a k~_b),

w_a = 1/2 for the entries of x and 1 for the appended one (its square adds the missing 1/2). So
phi(x~) = the products x~_a x~_b (a <= b): n (n + 1) / 2 features for n = d_h + 1 (2,145 at
d_h = 64), about half the work and memory of the full map, for exactly the same kernel. The state
S = sum_j phi(k_j) v_j^T is a plain sum; the weights w (:func:`square_weights`) multiply its rows
when it is read, (w * phi(q)) . S.

The unordered pairs {a, b} are enumerated as rotations: x~_a x~_{(a + r) mod n} for r = 0 .. n//2
covers every pair exactly once when n is odd (r = 0: the squares). For odd d_h (even n) a zero is
appended to x~ to make n odd; its products are zero features, harmless. The rotations are windows
(``unfold``) of x~ followed by its own first half, so the features are one broadcast product, not a
gather; they are stored with r fastest (index a * (n//2 + 1) + r), the layout that product gets.

:func:`taylor_attention` is the chunked causal form: inside each chunk of C tokens, pairwise
weights computed directly from q.k (C x C, all chunks in one batch; cheap); earlier chunks enter
through the running state sum phi(k) v^T, read by each chunk's queries. Chunks are processed in
groups whose feature tensors fit a memory budget (one group on GPUs; on CPUs one chunk at a time
keeps the big temporaries in cache and in memory the allocator reuses rather than fresh pages),
with the state carried between groups.

Training uses a hand-written backward (:class:`TaylorChunks`): it saves q, k, v and the state at the
start of each group (not the tokens x features tensors, which it rebuilds group by group), so
activation memory is O(L d) plus one state per group, not O(L d_h^2), and no forward is recomputed.
Per chunk it costs the forward's two state GEMMs twice (d/d features of q and k, d/d state and
d/d v), plus the feature map's own backward (:func:`features_backward`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

# Bytes one group's feature tensor may take: on CPUs one chunk per group (any budget below one
# chunk's features), which measured fastest; elsewhere everything in one batched group.
GROUP_BYTES = {"cpu": 0, "default": 2**30}


def _extended_size(head_dim: int) -> int:
    """n: entries of x~ = [x, 1] (plus a 0 when that count is even, so pairs tile rotations)."""
    return head_dim + 1 if head_dim % 2 == 0 else head_dim + 2


def n_features(head_dim: int) -> int:
    """Features per head of :func:`taylor_features`: n (n + 1) / 2 (2,145 at d_h = 64)."""
    n = _extended_size(head_dim)
    return n * (n + 1) // 2


def _extended(x: torch.Tensor) -> torch.Tensor:
    """x~ = [x, 1 (, 0)] followed by its first n//2 entries: its windows of length n (``unfold``)
    are its rotations, row r = x~_{a+r}."""
    d = x.size(-1)
    n = _extended_size(d)
    tail = [torch.ones_like(x[..., :1])] + ([torch.zeros_like(x[..., :1])] if n > d + 1 else [])
    return torch.cat([x, *tail, x[..., : n // 2]], dim=-1)


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """phi (..., n(n+1)/2): the products x~_a x~_b (a <= b) of x~ = [x, 1], each pair once.

    ``x`` (..., d) is q or k divided by d^(1/4). (w * phi(q)) . phi(k) = 1 + q.k + (q.k)^2/2
    with w = :func:`square_weights`.
    """
    n = _extended_size(x.size(-1))
    extended = _extended(x)
    products = extended[..., None, :n] * extended.unfold(-1, n, 1)   # [r, a] = x~_a x~_{a+r}
    # The product comes out with r fastest in memory; index it that way so flattening is a view.
    return products.transpose(-1, -2).flatten(-2)


def features_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """d/dx of sum(grad * taylor_features(x)): grad (..., F), x (..., d) -> (..., d).

    Feature [a, r] = x~_a x~_{a+r} sends grad * x~_{a+r} to a, and grad * x~_a to a + r (mod n).
    The second is a sum along diagonals, done by skewing: row r of the (rows, n) grid is shifted
    right by r through a zero-padded flat view, then the rows are summed; positions past n wrap.
    """
    d = x.size(-1)
    n = _extended_size(d)
    rows = n // 2 + 1
    extended = _extended(x)                                         # (..., n + rows - 1)
    g = grad.unflatten(-1, (n, rows))                               # [a, r]
    to_a = (g * extended.unfold(-1, n, 1).transpose(-1, -2)).sum(-1)
    sent = (g * extended[..., :n, None]).transpose(-1, -2)          # [r, a] -> a + r
    width = n + rows - 1
    skewed = F.pad(sent, (0, rows)).flatten(-2)[..., : rows * width].unflatten(-1, (rows, width))
    to_sum = skewed.sum(-2)                                         # (..., n + rows - 1)
    dx = to_a + to_sum[..., :n]
    dx[..., : rows - 1] += to_sum[..., n:]
    return dx[..., :d]


def square_weights(head_dim: int, dtype: torch.dtype = torch.float32,
                   device: torch.device | str | None = None) -> torch.Tensor:
    """w (F,): 1/2 at the squares x~_a^2 of x's entries, 1 at every other feature (the appended
    1's square and the cross products), so (w * phi(q)) . phi(k) = 1 + s + s^2/2."""
    n = _extended_size(head_dim)
    w = torch.ones(n, n // 2 + 1, dtype=dtype, device=device)
    w[:head_dim, 0] = 0.5
    return w.flatten()


def _accumulate(carry: torch.Tensor | None, fk: torch.Tensor, v: torch.Tensor, in_place: bool
                ) -> torch.Tensor:
    """carry + fk^T v (batched), kept in float32 at least."""
    acc = torch.promote_types(v.dtype, torch.float32)
    if carry is None:
        return torch.bmm(fk.transpose(1, 2), v).to(acc)
    if carry.dtype != v.dtype:
        return carry + torch.bmm(fk.transpose(1, 2), v)
    if in_place:
        return carry.baddbmm_(fk.transpose(1, 2), v)
    return torch.baddbmm(carry, fk.transpose(1, 2), v)


def _features(*xs: torch.Tensor | None) -> list[torch.Tensor | None]:
    """taylor_features of each x given (None: not needed), in one batched call for two: fewer,
    larger kernels (on a shared CPU each kernel's thread barrier can cost far more than its maths)."""
    present = [x for x in xs if x is not None]
    if len(present) == 2:
        found = iter(taylor_features(torch.stack(present)).unbind(0))
    else:
        found = iter([taylor_features(x) for x in present])
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


def _inter(q, k, v, carry, weights, build_state: bool, in_place: bool):
    """Earlier chunks' part of a group's outputs: q, k (R, G, C, d) (scaled; R = batch x heads),
    v (R, G, C, D), carry (R, F, D) the state of every earlier chunk (None: none). Returns (the
    part (R, G, C, D) or None, the state after the group or None when not ``build_state``);
    ``in_place``: the carry may be updated in place."""
    rows, groups, c, _ = q.shape
    q3, k3, v3 = (t.reshape(rows * groups, c, t.size(-1)) for t in (q, k, v))
    several = groups > 1
    fq, fk = _features(q3 if carry is not None or several else None,
                       k3 if build_state or several else None)
    part, new_carry = None, None
    if not several:  # read the state, then add this chunk to it
        if carry is not None:
            part = torch.bmm(fq, (carry * weights[:, None]).to(q.dtype))
        if build_state:
            new_carry = _accumulate(carry, fk, v3, in_place)
    else:
        before, inclusive = _prefixes(fk, v3, carry, rows)
        part = torch.bmm(fq, (before * weights[:, None]).to(q.dtype))
        if build_state:
            new_carry = inclusive[:, -1] if carry is None else carry + inclusive[:, -1]
    return (None if part is None else part.view(rows, groups, c, -1)), new_carry


def _inter_backward(q, k, v, carry, weights, dout, dcarry):
    """Gradients through :func:`_inter` (shapes as there): (dq, dk, dv) to add (each or None) and
    the gradient of the carry entering the group, given d out and the gradient of the state after
    the group (None: it reached nothing)."""
    rows, groups, c, _ = q.shape
    q3, k3, v3, do3 = (t.reshape(rows * groups, c, t.size(-1)) for t in (q, k, v, dout))
    dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    several = groups > 1
    reads = carry is not None or several
    fq, fk = _features(q3 if reads else None, k3 if dcarry is not None or several else None)
    before = _prefixes(fk, v3, carry, rows)[0] if several else carry
    dbefore = None
    if reads:  # part = phi(q) (w * before)
        dbefore = torch.bmm(fq.transpose(1, 2), do3).to(acc) * weights[:, None]
    # What each chunk's fk^T v reached: the carry out and, in a group, later chunks' prefixes.
    if not several:
        dstate = dcarry
        dcarry_in = dbefore if dcarry is None else dcarry if dbefore is None else dcarry + dbefore
    else:
        later = dbefore.view(rows, groups, *dbefore.shape[1:]).flip(1).cumsum(1).flip(1)
        dstate, dcarry_in = F.pad(later[:, 1:], (0, 0, 0, 0, 0, 1)), later[:, 0]
        if dcarry is not None:
            dstate, dcarry_in = dstate + dcarry[:, None], dcarry_in + dcarry
        dstate = dstate.reshape(rows * groups, *dstate.shape[2:])
    # d features of q (reads) and of k (states), through the feature map in one call.
    grads, xs = [], []
    if reads:
        grads.append(torch.bmm(do3, (before * weights[:, None]).to(dtype).transpose(1, 2)))
        xs.append(q3)
    if dstate is not None:
        dstate = dstate.to(dtype)
        grads.append(torch.bmm(v3, dstate.transpose(1, 2)))
        xs.append(k3)
    if len(xs) == 2:
        dxs = list(features_backward(torch.stack(grads), torch.stack(xs)).unbind(0))
    else:
        dxs = [features_backward(g, x) for g, x in zip(grads, xs)]
    dq = dxs.pop(0) if reads else None
    dk = dxs.pop(0) if dstate is not None else None
    dv = None if dstate is None else torch.bmm(fk, dstate)
    shape = (rows, groups, c, -1)
    return (*(None if t is None else t.view(shape) for t in (dq, dk, dv)), dcarry_in)


def _forward(q, k, v, weights, group, return_state, keep_carries):
    """Every chunk's outputs (R, N, C, D), the final state (or None) and the carry entering each
    group (kept for backward: then never updated in place)."""
    rows, n, c, _ = q.shape
    flat = [t.reshape(rows * n, c, t.size(-1)) for t in (q, k, v)]
    out = _intra(*flat).view(rows, n, c, -1)
    carry, carries = None, []
    for start in range(0, n, group):  # a loop over groups of chunks, each one batched
        part = slice(start, start + group)
        carries.append(carry)
        # The state is needed by later chunks of this group, later groups, or the caller.
        build = return_state or start + group < n
        inter, carry = _inter(q[:, part], k[:, part], v[:, part], carry, weights, build,
                              in_place=not keep_carries)
        if inter is not None:
            out[:, part] += inter
    return out, (carry if return_state else None), carries


class TaylorChunks(torch.autograd.Function):
    """The chunked form with its hand-written backward. Inputs: q, k (R, N, C, d) scaled, v (R, N,
    C, D), the square weights, the group size and whether to return the final state too."""

    @staticmethod
    def forward(ctx, q, k, v, weights, group, return_state):
        out, state, carries = _forward(q, k, v, weights, group, return_state, keep_carries=True)
        ctx.group = group
        ctx.save_for_backward(q, k, v, weights, *carries[1:])
        ctx.set_materialize_grads(False)
        return (out, state) if return_state else out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, dstate=None):
        q, k, v, weights, *carries = ctx.saved_tensors
        carries = [None, *carries]
        rows, n, c, _ = q.shape
        if dout is None:
            dout = torch.zeros(rows, n, c, v.size(-1), dtype=v.dtype, device=v.device)
        flat = [t.reshape(rows * n, c, t.size(-1)) for t in (q, k, v, dout)]
        dq, dk, dv = (t.view(rows, n, c, -1) for t in _intra_backward(*flat))
        dcarry = dstate
        for index in reversed(range(len(carries))):
            part = slice(index * ctx.group, (index + 1) * ctx.group)
            *adds, dcarry = _inter_backward(q[:, part], k[:, part], v[:, part], carries[index],
                                            weights, dout[:, part], dcarry)
            for grad, add in zip((dq, dk, dv), adds):
                if add is not None:
                    grad[:, part] += add
        return dq, dk, dv, None, None, None


def taylor_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = 128,
                     return_state: bool = False, group_bytes: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """sum_{j<=i} (1 + s_ij + s_ij^2/2) v_j with s_ij = q_i.k_j / sqrt(d_h), for every i.

    q, k (B, H, L, d_h), v (B, H, L, D) -> (B, H, L, D); a zero row of v contributes nothing (how
    padding is excluded; a last column of ones accumulates the normaliser). With ``return_state``
    also the state sum_j phi(k_j / d_h^(1/4)) v_j^T (B, H, F, D) over all L tokens (float32 at
    least), which :func:`taylor_step` continues. Time and memory are linear in L.
    """
    b, heads, length, d = q.shape
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
    group = max(1, group_bytes // (b * heads * c * n_features(d) * q.element_size()))
    weights = square_weights(d, torch.promote_types(q.dtype, torch.float32), q.device)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        result = TaylorChunks.apply(qc, kc, vc, weights, group, return_state)
        out, state = result if return_state else (result, None)
    else:
        out, state, _ = _forward(qc, kc, vc, weights, group, return_state, keep_carries=False)
    if state is not None:
        state = state.view(b, heads, *state.shape[1:])
    return out.reshape(b, heads, n * c, -1)[:, :, :length], state


def taylor_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrent form, one token: q, k (B, H, 1, d_h), v (B, H, 1, D), state (B, H, F, D) or
    None (empty) -> (output (B, H, 1, D), new state; the given one is not modified). The same sums
    as :func:`taylor_attention`."""
    d = q.size(-1)
    fk = taylor_features(k * d ** -0.25)
    update = (fk.transpose(-1, -2) @ v).to(torch.promote_types(v.dtype, torch.float32))
    state = update if state is None else state + update
    weights = square_weights(d, state.dtype, state.device)[:, None]
    return taylor_features(q * d ** -0.25) @ (state * weights).to(q.dtype), state
