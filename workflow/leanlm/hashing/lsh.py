"""HashFormers-LSH (§2.3.3, §2.3.5): locality-sensitive hashing of character n-gram features.

A token is a bag of its character 1-4-grams, counted, over the top 50K n-grams of the pretraining
corpus (footnote 4): a sparse vector x of dimension d_x. Two hash families act on x (DESIGN §8):

- Emb: N hyperplanes that are the N cyclic shifts of ONE standard-normal vector eta (a circulant
  matrix, so nothing of size d_x x N is stored); the bucket is argmax_i x.r^i with
  ``r^i[f] = eta[(f + i) mod len(eta)]``, i = 1..N (the thesis: r^1 = [eta_2, ..., eta_1]).
- Pool / Add / Proj (and ProFormer): T random hyperplanes, bit j = [x.r^j >= 0]
  (the thesis's sgn(sgn(x.r^j) + 1)).

The n-gram vocabulary is fitted once on a corpus and saved as JSON; the random vectors are drawn from
a seeded NumPy PCG64 generator, so a saved state reproduces the same hashes on any machine. Scores are
float64 and summed in a fixed order (bits: SciPy's sparse kernel; buckets: NumPy elementwise adds in
CSR order, see ``_circulant_argmax``), so hashes near a hyperplane or a tie do not flip between
machines either.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import repeat
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from leanlm.errors import ConfigError, DataError
from leanlm.hashing.ngrams import ngram_counts
from leanlm.io import write_json

TOP_NGRAMS = 50_000
N_MAX = 4
FORMAT = "leanlm-lsh-ngrams"


class NgramVocabulary:
    """The feature space of LSH: the ``size`` most frequent character 1..n_max-grams of a corpus."""

    def __init__(self, ngrams: Sequence[str], n_max: int = N_MAX):
        self.ngrams = list(ngrams)
        self.n_max = n_max
        self.index = {g: i for i, g in enumerate(self.ngrams)}
        if len(self.index) != len(self.ngrams):
            raise DataError("the n-gram vocabulary lists an n-gram twice")

    def __len__(self) -> int:
        return len(self.ngrams)

    @classmethod
    def fit(cls, tokens: Mapping[str, int] | Iterable[str], size: int = TOP_NGRAMS,
            n_max: int = N_MAX) -> "NgramVocabulary":
        """Top ``size`` n-grams by corpus frequency; ``tokens`` is a token stream or token -> count.

        Ties are broken by the n-gram itself, so the result does not depend on iteration order.
        """
        counts = ngram_counts(tokens, n_max)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]
        if not ranked:
            raise DataError("cannot fit an n-gram vocabulary on an empty corpus")
        return cls([g for g, _ in ranked], n_max)

    def features(self, tokens: Sequence[str]) -> sp.csr_matrix:
        """float64 CSR ``[len(tokens), len(self)]`` of n-gram counts (unknown n-grams dropped)."""
        n_max = self.n_max
        # char_ngrams of every token, flattened in one comprehension (no per-token call); the
        # number each token contributes is sum_n max(0, len - n + 1).
        flat = [t[i:i + n] for t in tokens for n in range(1, n_max + 1) for i in range(len(t) - n + 1)]
        chars = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        lengths = sum(np.clip(chars - n + 1, 0, None) for n in range(1, n_max + 1))
        cols = np.fromiter(map(self.index.get, flat, repeat(-1)), dtype=np.int64, count=len(flat))
        rows = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
        known = cols >= 0
        # COO -> CSR sums repeated (row, col) pairs: the counts.
        matrix = sp.coo_matrix((np.ones(int(known.sum())), (rows[known], cols[known])),
                               shape=(len(tokens), len(self)))
        return matrix.tocsr()

    def to_dict(self) -> dict:
        return {"format": FORMAT, "n_max": self.n_max, "ngrams": self.ngrams}

    @classmethod
    def from_dict(cls, state: dict) -> "NgramVocabulary":
        if state.get("format") != FORMAT:
            raise DataError(f"not an n-gram vocabulary (format {state.get('format')!r}, "
                            f"expected {FORMAT!r})")
        return cls(state["ngrams"], state["n_max"])

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "NgramVocabulary":
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, KeyError) as err:
            raise DataError(f"{path}: unreadable n-gram vocabulary ({err}); refit it") from None


class LSHHasher:
    """Token hasher for HashFormers-LSH: ``bits(tokens)`` (T hyperplanes) and ``buckets(tokens, N)``
    (argmax over N circulant hyperplanes)."""

    kind = "lsh"

    def __init__(self, vocabulary: NgramVocabulary, n_bits: int = 128, seed: int = 0):
        if n_bits < 1:
            raise ConfigError(f"LSH bits={n_bits} must be a positive integer")
        self.vocabulary, self.n_bits, self.seed = vocabulary, int(n_bits), int(seed)
        self._planes: np.ndarray | None = None

    @property
    def planes(self) -> np.ndarray:
        """float64 ``[d_x, T]`` standard-normal hyperplanes (drawn once, from the seed)."""
        if self._planes is None:
            rng = np.random.Generator(np.random.PCG64([self.seed, 0]))
            self._planes = rng.standard_normal((len(self.vocabulary), self.n_bits))
        return self._planes

    def rotator(self, n_buckets: int) -> np.ndarray:
        """The circulant's generating vector eta ~ N(0, 1), long enough for N distinct shifts."""
        rng = np.random.Generator(np.random.PCG64([self.seed, 1]))
        return rng.standard_normal(max(len(self.vocabulary), n_buckets))

    def bits(self, tokens: Sequence[str]) -> np.ndarray:
        """uint8 {0,1} ``[len(tokens), T]``: bit j is 1 where x.r^j >= 0 (a token with no known
        n-gram has x = 0 and all bits 1, as sgn(sgn(0) + 1) = 1)."""
        return self._bits(self.vocabulary.features(tokens))

    def _bits(self, x: sp.csr_matrix) -> np.ndarray:
        return (x @ self.planes >= 0).astype(np.uint8)

    def buckets(self, tokens: Sequence[str], n_buckets: int, chunk_elements: int = 1 << 22) -> np.ndarray:
        """int64 argmax_i x.r^i over the N circulant hyperplanes, i.e. bucket ids in [0, N).

        Ties go to the lowest bucket; a token with no known n-gram gets bucket 0. Work is
        O(nnz x N); R is never built (each n-gram's row of R is a slice of eta), and the scores of
        at most max(N, ``chunk_elements``) float64 values are held at once.
        """
        return self._buckets(self.vocabulary.features(tokens), n_buckets, chunk_elements)

    def bits_and_buckets(self, tokens: Sequence[str], n_buckets: int | None) -> tuple:
        """Both hashes from one feature extraction (``None`` buckets when ``n_buckets`` is None)."""
        x = self.vocabulary.features(tokens)
        return self._bits(x), (None if n_buckets is None else self._buckets(x, n_buckets))

    def _buckets(self, x: sp.csr_matrix, n_buckets: int, chunk_elements: int = 1 << 22) -> np.ndarray:
        if n_buckets < 1:
            raise ConfigError(f"buckets={n_buckets} must be a positive integer")
        return _circulant_argmax(x.tocsr(), self.rotator(n_buckets), int(n_buckets), chunk_elements)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "n_bits": self.n_bits, "seed": self.seed,
                "vocabulary": self.vocabulary.to_dict()}

    @classmethod
    def from_dict(cls, state: dict) -> "LSHHasher":
        return cls(NgramVocabulary.from_dict(state["vocabulary"]), state["n_bits"], state["seed"])

    @classmethod
    def fit(cls, tokens: Mapping[str, int] | Iterable[str], n_bits: int = 128, seed: int = 0,
            size: int = TOP_NGRAMS, n_max: int = N_MAX) -> "LSHHasher":
        """Fit the n-gram vocabulary on ``tokens`` (a stream or a Counter) and build the hasher."""
        if not isinstance(tokens, Mapping):
            tokens = Counter(tokens)
        return cls(NgramVocabulary.fit(tokens, size, n_max), n_bits, seed)


# Below this N the per-row kernel's Python overhead (one NumPy call per nonzero) outweighs its work,
# and the per-position kernel (one call per nonzero position across many rows) wins; measured on the
# 2-core dev machine (both ~0.02 ms/word at N = 2048). Both kernels give identical scores.
_ROW_KERNEL_MIN_BUCKETS = 2048
# The per-position kernel's accumulator block: ~1 MiB of float64 stays in L2.
_POSITION_BLOCK_ELEMENTS = 1 << 17


def _circulant_argmax(x: sp.csr_matrix, eta: np.ndarray, n_buckets: int,
                      chunk_elements: int) -> np.ndarray:
    """argmax_i sum_k x[b, f_k] * eta[(f_k + i) mod len(eta)], i = 1..N, for every row b of ``x``.

    With ``eta2 = [eta, eta[:N]]`` the N scores one nonzero (f, v) adds are ``v * eta2[f+1 : f+1+N]``
    (a slice, no gather, as f < len(eta)). Each row's scores start at 0.0 and add its nonzeros'
    products one at a time in CSR order, exactly as SciPy's ``csr @ dense`` kernel (csr_matvecs:
    ``y += a * x`` per nonzero) did in the first implementation, so the float64 sums, and therefore
    the argmax with its ties, are bit-identical to it. NumPy's add and multiply round each element
    exactly (IEEE 754, no fused multiply-add), so the result is the same on every machine.
    """
    eta2 = np.concatenate([eta, eta[:n_buckets]])
    data = x.data.astype(np.float64, copy=False)
    block = max(1, min(chunk_elements, _POSITION_BLOCK_ELEMENTS) // n_buckets)
    if n_buckets >= _ROW_KERNEL_MIN_BUCKETS or block == 1:
        return _argmax_by_rows(x.indptr, x.indices, data, eta2, n_buckets)
    return _argmax_by_positions(x.indptr, x.indices, data, eta2, n_buckets, block)


def _argmax_by_rows(indptr, indices, data, eta2: np.ndarray, n_buckets: int) -> np.ndarray:
    """One row at a time: one in-place add of an eta2 slice per nonzero (large N)."""
    n_rows = len(indptr) - 1
    out = np.zeros(n_rows, dtype=np.int64)  # rows without nonzeros: all scores 0, bucket 0
    scores, product = np.empty(n_buckets), np.empty(n_buckets)
    ptr, starts, values = indptr.tolist(), (indices + 1).tolist(), data.tolist()
    for row in range(n_rows):
        lo, hi = ptr[row], ptr[row + 1]
        if lo == hi:
            continue
        scores.fill(0.0)
        for k in range(lo, hi):
            window = eta2[starts[k]:starts[k] + n_buckets]
            if values[k] == 1.0:  # a count of 1 (most n-grams): 1.0 * w == w exactly
                np.add(scores, window, out=scores)
            else:
                np.multiply(window, values[k], out=product)
                np.add(scores, product, out=scores)
        out[row] = scores.argmax()
    return out


def _argmax_by_positions(indptr, indices, data, eta2: np.ndarray, n_buckets: int,
                         block: int) -> np.ndarray:
    """``block`` rows at a time, looping over the nonzero position k (<= the longest row's nnz)
    rather than over rows: step k adds every row's k-th product. Rows are sorted by nnz
    (descending) so the rows still active at step k are a prefix of the block (small N)."""
    n_rows = len(indptr) - 1
    out = np.zeros(n_rows, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(eta2, n_buckets)  # windows[s] = eta2[s:s+N]
    nnz = np.diff(indptr)
    order = np.argsort(-nnz, kind="stable")
    for first in range(0, n_rows, block):
        rows = order[first:first + block]
        counts = nnz[rows]
        longest = int(counts[0])
        if longest == 0:
            break  # rows are sorted by nnz: this block and every later one are all-zero rows
        active = (counts[:, None] > np.arange(longest)).sum(axis=0).tolist()
        starts = indptr[rows]
        scores = np.zeros((len(rows), n_buckets))
        for k in range(longest):
            at = starts[:active[k]] + k
            product = windows[indices[at] + 1]  # [active rows, N], a copy
            values = data[at]
            if not (values == 1.0).all():
                product *= values[:, None]
            scores[:active[k]] += product
        out[rows] = scores.argmax(axis=1)
    return out
