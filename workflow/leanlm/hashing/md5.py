"""HashFormers-MD (§2.3.2): HMAC-MD5 of a token with a fixed key (DESIGN §8).

The thesis: "The mapping can be reproduced given the same secret key"; the official code uses the
key ``b"en"``, our default. A digest is read as a 128-bit integer v:

- Emb: the embedding index is ``v mod N``;
- Pool / Add / Proj: the T = 128 bits of v, most significant first.

The digests come from hashlib per distinct token (C code, about a microsecond each); turning them
into buckets and bits is array code over all tokens at once.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Sequence

import numpy as np

from leanlm.errors import ConfigError

DEFAULT_KEY = b"en"
DIGEST_BITS = 128


def md5_digests(tokens: Sequence[str], key: bytes = DEFAULT_KEY) -> np.ndarray:
    """uint8 array ``[len(tokens), 16]``: HMAC-MD5(key, token as UTF-8) of each token."""
    # One keyed HMAC object, copied per token: the key schedule is computed once, not per token.
    base = hmac.new(key, digestmod=hashlib.md5)
    out = bytearray()
    for token in tokens:
        h = base.copy()
        h.update(token.encode("utf-8"))
        out += h.digest()
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(len(tokens), 16)


def digest_bits(digests: np.ndarray, n_bits: int = DIGEST_BITS) -> np.ndarray:
    """uint8 {0,1} array ``[n, n_bits]``: the digests' bits, most significant first."""
    if not 1 <= n_bits <= DIGEST_BITS:
        raise ConfigError(f"MD5 gives {DIGEST_BITS} bits; bits={n_bits} must be in 1..{DIGEST_BITS}")
    return np.unpackbits(digests, axis=1, bitorder="big")[:, :n_bits]


def digest_buckets(digests: np.ndarray, n_buckets: int) -> np.ndarray:
    """int64 ``v mod n_buckets`` for each digest read as a big-endian 128-bit integer v.

    v = hi 2^64 + lo, so v mod N = ((hi mod N)(2^64 mod N) + lo mod N) mod N; with N < 2^32 every
    product fits in uint64, so this is exact without Python integers.
    """
    if not 1 <= n_buckets < 2**32:
        raise ConfigError(f"buckets={n_buckets} must be in 1..2^32-1")
    words = digests.reshape(-1, 16).view(">u8").astype(np.uint64)  # big-endian hi, lo
    n = np.uint64(n_buckets)
    shift = np.uint64(pow(2, 64, n_buckets))
    hi, lo = words[:, 0] % n, words[:, 1] % n
    return ((hi * shift % n + lo) % n).astype(np.int64)


def hexdigest_bucket(hexdigest: str, n_buckets: int) -> int:
    """The thesis's worked rule for one printed digest: "transform its binary value into decimal and
    then compute the index i = v % N" (§2.3.2)."""
    return int(hexdigest, 16) % n_buckets


class MD5Hasher:
    """Token hasher for HashFormers-MD: ``bits(tokens)`` and ``buckets(tokens, N)``."""

    kind = "md5"

    def __init__(self, key: bytes | str = DEFAULT_KEY, n_bits: int = DIGEST_BITS):
        self.key = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        if not 1 <= n_bits <= DIGEST_BITS:
            raise ConfigError(f"MD5 gives {DIGEST_BITS} bits; bits={n_bits} must be in 1..{DIGEST_BITS}")
        self.n_bits = n_bits

    def bits(self, tokens: Sequence[str]) -> np.ndarray:
        return digest_bits(md5_digests(tokens, self.key), self.n_bits)

    def buckets(self, tokens: Sequence[str], n_buckets: int) -> np.ndarray:
        return digest_buckets(md5_digests(tokens, self.key), n_buckets)

    def bits_and_buckets(self, tokens: Sequence[str], n_buckets: int | None) -> tuple:
        """Both hashes from one pass of HMAC (``None`` buckets when ``n_buckets`` is None)."""
        digests = md5_digests(tokens, self.key)
        buckets = None if n_buckets is None else digest_buckets(digests, n_buckets)
        return digest_bits(digests, self.n_bits), buckets

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key.decode("latin-1"), "n_bits": self.n_bits}

    @classmethod
    def from_dict(cls, state: dict) -> "MD5Hasher":
        return cls(key=state["key"].encode("latin-1"), n_bits=state["n_bits"])
