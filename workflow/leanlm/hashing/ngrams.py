"""Character n-grams of tokens: LSH's morphological features and EELBERT's rolling hashes.

Both work per *distinct* token (a few microseconds of Python each); everything after the extraction
is array code.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

import numpy as np

# EELBERT's polynomial rolling hash (blog_dynamic_hash_embeddings.txt): base p and modulus m.
ROLLING_BASE = 31
ROLLING_MODULUS = 10**9 + 7


def char_ngrams(token: str, n_max: int = 4) -> list[str]:
    """Every character n-gram of ``token`` for n = 1..n_max, with repeats (counts are features)."""
    length = len(token)
    return [token[i:i + n] for n in range(1, n_max + 1) for i in range(length - n + 1)]


def ngram_counts(token_counts: Mapping[str, int] | Iterable[str], n_max: int = 4) -> Counter:
    """Corpus frequency of every character n-gram: each token's n-grams weighted by its frequency."""
    if not isinstance(token_counts, Mapping):
        token_counts = Counter(token_counts)
    counts: Counter = Counter()
    for token, freq in token_counts.items():
        for gram, k in Counter(char_ngrams(token, n_max)).items():
            counts[gram] += k * freq
    return counts


def rolling_hash(text: str, base: int = ROLLING_BASE, modulus: int = ROLLING_MODULUS) -> int:
    """``s[0] p^(n-1) + s[1] p^(n-2) + ... + s[n-1]  (mod m)`` with ``s[i] = ord(text[i])``.

    The blog's formula; its JAX sketch subtracts 96 from each code point, which only matters for
    lower-case ASCII and is not part of the formula, so we follow the formula.
    """
    value = 0
    for char in text:
        value = (value * base + ord(char)) % modulus
    return value


def ngram_rolling_hashes(tokens: Sequence[str], n_max: int, max_chars: int,
                         base: int = ROLLING_BASE, modulus: int = ROLLING_MODULUS) -> np.ndarray:
    """int64 array ``[len(tokens), n_max, max_chars]``: entry ``[t, n-1, i]`` is the rolling hash of
    the n-gram of token t starting at character i, or -1 where there is none.

    Tokens longer than ``max_chars`` characters are cut to their first ``max_chars`` (EELBERT hashes
    WordPiece pieces, which are short; the cut keeps the feature tensor rectangular).
    """
    out = np.full((len(tokens), n_max, max_chars), -1, dtype=np.int64)
    for row, token in enumerate(tokens):
        token = token[:max_chars]
        codes = [ord(c) for c in token]
        for n in range(1, min(n_max, len(codes)) + 1):
            # Rolling update: h(i+1) = (h(i) - s[i] p^(n-1)) p + s[i+n]; exact in Python ints.
            top = pow(base, n - 1, modulus)
            value = 0
            for c in codes[:n]:
                value = (value * base + c) % modulus
            out[row, n - 1, 0] = value
            for i in range(1, len(codes) - n + 1):
                value = ((value - codes[i - 1] * top) * base + codes[i + n - 1]) % modulus
                out[row, n - 1, i] = value
    return out
