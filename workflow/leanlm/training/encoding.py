"""What the pipeline reads of an encoded text, and how a text (pair) is laid out with special tokens.

Shared by the hash codebook tokenizers (:mod:`leanlm.hashing.inputs`) and CANINE's characters
(:mod:`leanlm.training.hub_checkpoint`), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leanlm.errors import ConfigError


@dataclass
class Encoding:
    """What the pipeline reads of a ``tokenizers.Encoding``."""

    ids: list[int]
    type_ids: list[int] = field(default_factory=list)


def assemble(a: list[int], b: list[int] | None, cls_id: int, sep_id: int, max_length: int | None,
             special: bool = True) -> Encoding:
    """``[CLS] a [SEP] (b [SEP])`` with type ids, cut to ``max_length`` ids longest-first."""
    if max_length is not None:
        budget = max_length - (special * (2 if b is None else 3))
        if budget < 0:
            raise ConfigError(f"max length {max_length} leaves no room for the special tokens")
        if b is None:
            a = a[:budget]
        elif len(a) + len(b) > budget:
            short_a = len(a) <= len(b)
            keep_short = min(len(a) if short_a else len(b), budget // 2)
            keep_long = budget - keep_short
            a, b = (a[:keep_short], b[:keep_long]) if short_a else (a[:keep_long], b[:keep_short])
    if not special:
        return Encoding(a + (b or []), [0] * len(a) + [1] * len(b or []))
    ids = [cls_id, *a, sep_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, sep_id]
        types += [1] * (len(b) + 1)
    return Encoding(ids, types)
