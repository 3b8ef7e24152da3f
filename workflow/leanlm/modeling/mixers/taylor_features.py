"""Approximate's feature map: phi(q) . phi(k) = 1 + s + s^2/2, each pair of entries once, and its backward.

For s = q.k / sqrt(d_h) the Taylor weight 1 + s + s^2/2 is a dot product of feature maps. Based's
map [1, x, vec(x x^T)/sqrt(2)] has 1 + d_h + d_h^2 features (4,161 at d_h = 64), but x x^T is
symmetric, so each product x_a x_b (a < b) is needed once, counted twice. Appending a constant 1
to x folds the degree-0 and degree-1 terms into the same products: with x~ = [x / d_h^(1/4), 1],

    1 + s + s^2/2 = 1/2 (q~ . k~)^2 + 1/2
                  = sum_a w_a q~_a^2 k~_a^2 + sum_{a<b} (q~_a q~_b)(k~_a k~_b),

w_a = 1/2 for the entries of x and 1 for the appended one (its square adds the missing 1/2). So
phi(x~) = sqrt(w) x~_a x~_b (a <= b; the weight only on squares) has n (n + 1) / 2 features for
n = d_h + 1 (2,145 at d_h = 64), about half the work and memory of the full map, for exactly the
same kernel: phi(q) . phi(k) = 1 + s + s^2/2. The weight is split evenly between the two sides so
that the state S = sum_j phi(k_j) v_j^T is read by phi(q) alone, with no weighted copy of S.

The unordered pairs {a, b} are enumerated as rotations: x~_a x~_{(a + r) mod n} for r = 0 .. n//2
covers every pair exactly once when n is odd (r = 0: the squares). For odd d_h (even n) a zero is
appended to x~ to make n odd; its products are zero features, harmless. The rotations are windows
(``unfold``) of x~ followed by its own first half, so the features are one broadcast product, not a
gather. They are stored rotation by rotation, a fastest (index r * n + a): then both sums of the
feature map's backward run along rows of contiguous memory (measured 1.8x faster than r fastest).

Split from :mod:`leanlm.modeling.mixers.taylor` (the chunked causal kernel that uses it); shared code of the
mixers folder, declaring no mixer. :class:`Buffers` holds the scratch tensors both reuse within one call.
"""

from __future__ import annotations

import math

import torch


# sqrt(w) on the squares of x's entries (w = 1/2), on each side of phi(q) . phi(k).
SQRT_HALF = math.sqrt(0.5)


class Buffers:
    """Scratch tensors kept for the length of one call, one per (name, shape, dtype, device).

    Every group of chunks asks for the same shapes, so each temporary is allocated once and then
    overwritten: no page faults per op (see the module docstring). A tensor from here is valid
    until the next request for the same name, so callers use it before asking again.
    """

    def __init__(self, feature_width: int | None = None):
        self._held: dict[tuple, torch.Tensor] = {}
        # Row width of the feature tensors: n_features, or more with zero columns (ALIGN_BYTES).
        self.feature_width = feature_width

    def _get(self, name: str, shape: tuple[int, ...], like: torch.Tensor, zero: bool) -> torch.Tensor:
        key = (name, tuple(shape), like.dtype, like.device)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = like.new_zeros(shape) if zero else like.new_empty(shape)
        return held

    def empty(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A tensor of ``shape`` with ``like``'s dtype and device, contents undefined."""
        return self._get(name, shape, like, zero=False)

    def zeros(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """Zeroed when first made and never cleared again: for regions callers never write."""
        return self._get(name, shape, like, zero=True)


def aligned(width: int, element_size: int, align_bytes: int) -> int:
    """``width`` rounded up so that a row of ``element_size``-byte entries is a multiple of
    ``align_bytes`` (0: unchanged)."""
    if align_bytes <= 0:
        return width
    step = max(1, align_bytes // math.gcd(align_bytes, element_size))
    return -(-width // step) * step


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


def taylor_features(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """phi (..., n(n+1)/2): sqrt(w) x~_a x~_b (a <= b) of x~ = [x, 1], each pair once.

    ``x`` (..., d) is q or k divided by d^(1/4); phi(q) . phi(k) = 1 + q.k + (q.k)^2/2. ``out``:
    a tensor of the result's shape to write into (else a new one).
    """
    d = x.size(-1)
    n = _extended_size(d)
    extended = _extended(x)
    pairs = (extended[..., None, :n], extended.unfold(-1, n, 1))   # [r, a] = x~_a x~_{a+r}
    # Compiled, into a new tensor: AOTAutograd cannot write this product (laid out as unfold's windows)
    # through ``out=`` into the buffer's view, and the compiler plans memory itself anyway.
    if out is None or torch.compiler.is_compiling():  # differentiable (the tests' reference too)
        grid = torch.mul(*pairs)
        grid[..., 0, :d] *= SQRT_HALF
        return grid.flatten(-2)
    grid = torch.mul(*pairs, out=out.unflatten(-1, (n // 2 + 1, n)))
    grid[..., 0, :d] *= SQRT_HALF
    return out


def features_backward(grad: torch.Tensor, x: torch.Tensor, buffers: Buffers | None = None
                      ) -> torch.Tensor:
    """d/dx of sum(grad * taylor_features(x)): grad (..., F), x (..., d) -> (..., d).

    Feature [r, a] = c x~_a x~_{a+r} (c = sqrt(w)) sends c grad x~_{a+r} to a, and c grad x~_a to
    a + r (mod n). Both are first summed with c = 1, a sum over r of contiguous rows; a square
    (r = 0) sends its two halves to the same a, so c then enters as one correction,
    (2c - 2) grad x~_a there. The sum to a + r runs along diagonals, done by skewing: row r is
    shifted right by r through a flat view with ``rows`` zeros after each row, then the rows are
    summed; positions past n wrap. ``buffers`` holds the two grid-sized products between calls.
    """
    buffers = buffers or Buffers()
    d = x.size(-1)
    n = _extended_size(d)
    rows = n // 2 + 1
    lead = x.shape[:-1]
    extended = _extended(x)                                         # (..., n + rows - 1)
    g = grad.unflatten(-1, (rows, n))                               # [r, a]
    products = torch.mul(g, extended.unfold(-1, n, 1),
                         out=buffers.empty("features_backward.to_a", (*lead, rows, n), grad))
    to_a = products.sum(-2)
    # Rows [r, a] with `rows` zeros after each (written once, never overwritten): the flat view of
    # the first rows * width entries, width = n + rows - 1, puts row r's entry a at column a + r.
    padded = buffers.zeros("features_backward.skew", (*lead, rows, n + rows), grad)
    if torch.compiler.is_compiling():  # dynamo refuses out= into a non-contiguous view (a graph break)
        padded[..., :n] = g * extended[..., None, :n]
    else:  # eager: the product written in place, no temporary (module docstring: page faults)
        torch.mul(g, extended[..., None, :n], out=padded[..., :n])
    width = n + rows - 1
    to_sum = padded.flatten(-2)[..., : rows * width].unflatten(-1, (rows, width)).sum(-2)
    dx = to_a + to_sum[..., :n]
    dx[..., : rows - 1] += to_sum[..., n:]
    return dx[..., :d].addcmul_(g[..., 0, :d], x, value=2 * SQRT_HALF - 2)
