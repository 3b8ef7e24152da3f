"""Turning prepared data into the engine's random-access batches.

The engine asks for ``batch_at(step, micro)``; answering from a per-epoch seeded permutation means
the data order depends only on (seed, step), never on how often the job was restarted, which is
what makes resume-after-kill exact.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
from leanlm.progress import progress

from leanlm.errors import DataError
from leanlm.io import read_jsonl

ENCODE_CHUNK = 2048  # documents per encode_batch call: bounded memory, fast-tokenizer parallelism


@functools.lru_cache(maxsize=2)
def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffle of ``range(n)`` for one epoch (read-only: it is shared). Kept for the two most recent
    epochs (a batch may straddle two): every micro-batch reads a slice of it, and drawing the
    permutation of tens of millions of packed rows anew each time would cost more than the step."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def example_indices(n: int, seed: int, start: int, count: int) -> torch.Tensor:
    """Indices ``start .. start+count`` of the endless stream of per-epoch shuffles of ``range(n)``."""
    pieces, position, end = [], start, start + count
    while position < end:
        epoch, offset = divmod(position, n)
        take = min(end - position, n - offset)
        pieces.append(epoch_permutation(n, seed, epoch)[offset : offset + take])
        position += take
    if len(pieces) == 1:
        return pieces[0].clone()  # the caller's own: the cached shuffle must not change through it
    return torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.long)


def micro_batches_per_step(grad_accum: int) -> int:
    """Micro-batches consumed per optimizer step across all ranks: ``grad_accum``, whatever the world
    size (the engine gives rank r the micro indices r, r + world_size, ... below grad_accum), so the
    batches of a step never depend on how many processes share it."""
    return grad_accum


def padded_dims(batch: dict[str, torch.Tensor], length_dim: int = 1) -> dict[str, tuple[int, ...]]:
    """``varying_dims`` of a batch padded to its longest example (:func:`collate`): dimension
    ``length_dim`` of every tensor that has one (ids, mask, token types, a token's hash features).
    The batch size is fixed (``example_indices`` runs on into the next epoch), so it is not marked."""
    return {name: (length_dim,) for name, tensor in batch.items() if tensor.dim() > length_dim}


def read_documents(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(f"corpus split {path} is missing; run the data stage first (`snakemake data` or `dvc repro`)")
    return [row["text"] for row in read_jsonl(path)]


def tokenize_documents(tokenizer, texts: list[str], desc: str) -> list[list[int]]:
    """Token ids of each document, without special tokens (packing adds [CLS]/[SEP])."""
    ids: list[list[int]] = []
    for start in progress(range(0, len(texts), ENCODE_CHUNK), desc=desc, unit="chunk", leave=False):
        batch = tokenizer.encode_batch(texts[start : start + ENCODE_CHUNK], add_special_tokens=False)
        ids.extend(enc.ids for enc in batch)
    return ids


def encode_examples(tokenizer, rows: list[dict], max_len: int) -> list[tuple[list[int], list[int]]]:
    """(input_ids, token_type_ids) per task example: [CLS] a [SEP] (b [SEP]), truncated to max_len."""
    tokenizer.enable_truncation(max_length=max_len)
    tokenizer.no_padding()
    singles = [i for i, r in enumerate(rows) if r.get("text_b") is None]
    pairs = [i for i, r in enumerate(rows) if r.get("text_b") is not None]
    out: list = [None] * len(rows)
    if singles:
        for i, enc in zip(singles, tokenizer.encode_batch([rows[i]["text_a"] for i in singles])):
            out[i] = (enc.ids, enc.type_ids)
    if pairs:
        encs = tokenizer.encode_batch([(rows[i]["text_a"], rows[i]["text_b"]) for i in pairs])
        for i, enc in zip(pairs, encs):
            out[i] = (enc.ids, enc.type_ids)
    tokenizer.no_truncation()
    return out


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad a list of encoded examples to the longest one (dynamic padding saves compute)."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    type_ids = np.zeros((len(examples), width), dtype=np.int64)
    mask = np.zeros((len(examples), width), dtype=np.int64)
    for row, (ids, types) in enumerate(examples):
        input_ids[row, : len(ids)] = ids
        type_ids[row, : len(types)] = types
        mask[row, : len(ids)] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.from_numpy(type_ids),
        "attention_mask": torch.from_numpy(mask),
    }
