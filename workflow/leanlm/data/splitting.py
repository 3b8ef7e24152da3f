"""Deterministic splits and seeded samples: hashes of names, never global RNG state.

A unit (document, sentence, question, row) goes to a split by a SHA-256 hash of the seed, a
namespace (e.g. the task name) and its key, so its split never depends on what else is in the data,
on the order it was read in, or on the Python hash seed.
"""

from __future__ import annotations

import hashlib
import random
from typing import Sequence, TypeVar

T = TypeVar("T")
SPLITS = ("train", "validation", "test")


def unit_interval(*parts: object) -> float:
    """A uniform number in [0, 1) determined by ``parts`` (a stable hash, the same on every machine)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_split(key: str, seed: int, validation_fraction: float, test_fraction: float, namespace: str = "") -> str:
    """"train", "validation" or "test" for ``key``: test below test_fraction, then validation."""
    u = unit_interval(seed, namespace, key)
    if u < test_fraction:
        return "test"
    if u < test_fraction + validation_fraction:
        return "validation"
    return "train"


def stable_hash(name: str) -> int:
    """A 32-bit integer for a name, for seeding per-task RNGs (``random.Random(seed + stable_hash(task))``)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big")


def task_rng(seed: int, task: str) -> random.Random:
    """The one RNG of a task's builder: seeded by the profile's seed and the task name."""
    return random.Random(seed + stable_hash(task))


def seeded_sample(rows: Sequence[T], limit: int | None, rng: random.Random) -> list[T]:
    """A seeded random sample of at most ``limit`` rows (all when ``limit`` is None), in random order."""
    rows = list(rows)
    rng.shuffle(rows)
    return rows if limit is None else rows[:limit]
