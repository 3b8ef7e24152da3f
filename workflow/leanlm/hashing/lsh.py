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
float64 and summed by SciPy's sparse kernels in a fixed order, so bits near a hyperplane do not flip
between machines either.
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

        For a chunk of tokens only the columns of R for the n-grams they contain are built
        (``|used n-grams| x N``), then multiplied by the sparse features; work is O(nnz x N).
        """
        return self._buckets(self.vocabulary.features(tokens), n_buckets, chunk_elements)

    def bits_and_buckets(self, tokens: Sequence[str], n_buckets: int | None) -> tuple:
        """Both hashes from one feature extraction (``None`` buckets when ``n_buckets`` is None)."""
        x = self.vocabulary.features(tokens)
        return self._bits(x), (None if n_buckets is None else self._buckets(x, n_buckets))

    def _buckets(self, x: sp.csr_matrix, n_buckets: int, chunk_elements: int = 1 << 22) -> np.ndarray:
        if n_buckets < 1:
            raise ConfigError(f"buckets={n_buckets} must be a positive integer")
        eta = self.rotator(n_buckets)
        offsets = np.arange(1, n_buckets + 1, dtype=np.int64)
        n_rows = x.shape[0]
        out = np.zeros(n_rows, dtype=np.int64)
        rows_per_chunk = max(1, chunk_elements // (n_buckets * (x.nnz // max(1, n_rows) + 1)))
        for start in range(0, n_rows, rows_per_chunk):
            block = x[start:start + rows_per_chunk]
            used = np.unique(block.indices)
            if used.size == 0:
                continue  # all-zero features: every score is 0, argmax is bucket 0
            sub = (used[:, None] + offsets[None, :]) % eta.size
            columns = eta[sub]  # [|used|, N]: rows of R for the used n-grams
            local = sp.csr_matrix((block.data, np.searchsorted(used, block.indices), block.indptr),
                                  shape=(block.shape[0], used.size))
            out[start:start + block.shape[0]] = np.asarray(local @ columns).argmax(axis=1)
        return out

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
