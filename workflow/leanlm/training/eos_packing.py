"""Causal-LM packing with an end-of-text token, streamed from disk (ch. 4: Pythia's BPE on SlimPajama).

Pythia's tokenizer has no [CLS]/[SEP]/[MASK], only ``<|endoftext|>``, so the rows of
:func:`leanlm.training.objectives.pack_sequences` (``[CLS] ... [SEP]``) cannot be built. Documents are
instead joined as ``EOS d1 EOS d2 EOS d3 ...``, the separator GPT-NeoX pretrained Pythia with, and the
stream is cut into rows of ``seq_len`` tokens (the tail that fills no row is dropped). Every document
starts right after an EOS, which is also the token lm-eval puts before a text it scores (the adapter's
``prefix_token_id``, :mod:`leanlm.evaluation.lm_eval_adapter`), so training and evaluation agree on how
a text begins. Empty documents add nothing.

At the paper's scale (~16B tokens of SlimPajama) neither the token ids nor the packed rows fit in memory
as Python lists or int64 tensors. :func:`token_stream` tokenises a split once per (tokenizer, split file),
``ENCODE_CHUNK`` documents at a time, into ``<cache>/tokenized/<key>.eos.<dtype>`` (uint16 when the
vocabulary fits: 2 bytes a token) and reads it back as a memory map; :class:`StreamRows` gathers the rows
a batch needs from it. Written atomically, so concurrent jobs at worst both write it, like
:mod:`leanlm.training.token_cache`, whose key (tokenizer and split hashes) it shares.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.io import atomic_path
from leanlm.training.text_batches import ENCODE_CHUNK
from leanlm.training.token_cache import cache_key

log = logging.getLogger(__name__)


def pack_with_eos(token_id_lists: Iterable[Sequence[int]], seq_len: int, eos_id: int) -> torch.Tensor:
    """``EOS d1 EOS d2 ...`` cut into rows of ``seq_len`` (in memory: the reference for :class:`StreamRows`)."""
    _check_seq_len(seq_len)
    pieces = []
    for doc in token_id_lists:
        if len(doc):
            pieces += [np.array([eos_id], dtype=np.int64), np.asarray(doc, dtype=np.int64).ravel()]
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return StreamRows(stream, seq_len)[:]


def _check_seq_len(seq_len: int) -> None:
    if seq_len < 2:
        raise ConfigError(f"seq_len={seq_len} is too short for causal LM rows (a token and its successor)")


def stream_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type holding every id (uint16 for Pythia's 50,277 tokens)."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class StreamRows:
    """Rows of ``seq_len`` consecutive tokens of a (memory-mapped) token stream, as int64 tensors.

    Supports what the pretraining batches use of a packed ``(N, seq_len)`` tensor: ``len``, indexing by
    a tensor or array of row numbers and by a slice; only the rows asked for are read.
    """

    def __init__(self, stream: np.ndarray, seq_len: int):
        _check_seq_len(seq_len)
        n_rows = len(stream) // seq_len
        self.seq_len = seq_len
        self.rows = np.asarray(stream)[: n_rows * seq_len].reshape(n_rows, seq_len)

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        return torch.from_numpy(np.array(self.rows[index], dtype=np.int64))


def _text_chunks(path: Path) -> Iterator[list[str]]:
    """The split's texts, ENCODE_CHUNK at a time (never the whole split in memory)."""
    chunk: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                chunk.append(json.loads(line)["text"])
                if len(chunk) == ENCODE_CHUNK:
                    yield chunk
                    chunk = []
    if chunk:
        yield chunk


def _write_stream(tokenizer, path: Path, eos_id: int, dtype: np.dtype, target: Path, desc: str) -> int:
    eos = np.array([eos_id], dtype=dtype)
    written = 0
    with atomic_path(target, suffix=target.suffix) as tmp, open(tmp, "wb") as out:
        for number, texts in enumerate(_text_chunks(path)):
            pieces = []
            for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
                if encoding.ids:
                    pieces += [eos, np.asarray(encoding.ids, dtype=dtype)]
            if pieces:
                block = np.concatenate(pieces)
                out.write(block.tobytes())
                written += block.size
            if number % 100 == 99:
                log.info("%s: %d documents, %d tokens so far", desc, (number + 1) * ENCODE_CHUNK, written)
    return written


def token_stream(tokenizer, path: str | Path, eos_id: int, desc: str) -> np.ndarray:
    """``EOS d1 EOS d2 ...`` of the corpus split ``path`` as a read-only memory map (built once, cached)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"corpus split {path} is missing; run the data stage first (`snakemake data` or `dvc repro`)")
    key = cache_key(tokenizer, path)
    if key is None:
        raise DataError(f"{desc}: end-of-text packing needs a tokenizers.Tokenizer (one that can be fingerprinted)")
    dtype = stream_dtype(tokenizer.get_vocab_size(with_added_tokens=True))
    target = paths.cache_dir() / "tokenized" / f"{key}-eos{eos_id}.eos.{dtype.name}"
    if not target.is_file():
        tokenizer.no_truncation()
        tokenizer.no_padding()
        tokens = _write_stream(tokenizer, path, eos_id, dtype, target, desc)
        log.info("%s: %d tokens of %s written to %s", desc, tokens, path.name, target)
    else:
        log.info("%s: token stream of %s from the cache %s", desc, path.name, target)
    if target.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(target, dtype=dtype, mode="r")


def eos_packed_rows(tokenizer, path: str | Path, seq_len: int, eos_id: int, desc: str) -> StreamRows:
    """The split packed as ``EOS d1 EOS d2 ...`` rows of ``seq_len`` (DataError when none is full)."""
    rows = StreamRows(token_stream(tokenizer, path, eos_id, desc), seq_len)
    if len(rows) == 0:
        raise DataError(f"{path}: no full sequence of {seq_len} tokens could be packed; the corpus is too small")
    return rows
