"""Packing the pretraining corpus from a memory-mapped token stream, so no corpus sits in memory.

Two packings, both built once per (tokenizer, split file, separator) and read back as a memory map:

- **End-of-text** (ch. 4: Pythia's BPE on SlimPajama). Pythia's tokenizer has no [CLS]/[SEP]/[MASK],
  only ``<|endoftext|>``. Documents are joined as ``EOS d1 EOS d2 EOS d3 ...``, the separator GPT-NeoX
  pretrained Pythia with, and the stream is cut into rows of ``seq_len`` tokens. Every document starts right
  after an EOS, which is also the token lm-eval puts before a text it scores (the adapter's
  ``prefix_token_id``, :mod:`leanlm.lm_eval.adapter`), so training and evaluation agree on how a
  text begins. :func:`eos_packed_rows`; :func:`pack_with_eos` is its in-memory reference.
- **[CLS]/[SEP]** (chs. 2-3: BERT-style tokenizers on Wikipedia + BookCorpus, billions of tokens).
  Documents are joined as ``d1 SEP d2 SEP d3 ...`` (one [SEP] between consecutive documents), the stream
  is cut into bodies of ``seq_len - 2`` tokens and each row is ``[CLS] body [SEP]``, the special tokens
  added as rows are read: exactly the rows of :func:`leanlm.training.objectives.pack_sequences` (the
  in-memory reference). :func:`sep_packed_rows`.

In both, empty documents add nothing and the tail that fills no row is dropped. :func:`token_stream`
tokenises a split ``ENCODE_CHUNK`` documents at a time into ``<cache>/tokenized/<key>-<kind><id>.<kind>.<dtype>``
(``kind`` eos or sep and the separator's id in the name, so the two streams of one split never collide;
uint16 when the vocabulary fits: 2 bytes a token) plus a ``.json`` record of its length and SHA-256, and
:class:`StreamRows` gathers the rows a batch needs. Written atomically (a killed job leaves no partial
stream) and under an inter-process lock (:func:`leanlm.scratch.build_once`), so concurrent jobs on one split
tokenise it once. The key (tokenizer and split hashes) is :mod:`leanlm.training.token_cache`'s. A
stream whose size or SHA-256 disagrees with its record (truncated copy, killed between the two writes, bytes
overwritten, a stream from before records held a checksum) is rebuilt with a warning naming it, never
trusted. Only tokenizers that key can fingerprint (:func:`streamable`) are streamed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.io import atomic_path, iter_jsonl, sha256_file, write_json
from leanlm.scratch import build_once
from leanlm.training.text_batches import ENCODE_CHUNK
from leanlm.training.token_cache import cache_key

log = logging.getLogger(__name__)

# Packing kind -> whether every document is preceded by the separator (EOS d1 EOS d2) or only
# followed by one when another document comes (d1 SEP d2).
LEADING_SEPARATOR = {"eos": True, "sep": False}


def pack_with_eos(token_id_lists: Iterable[Sequence[int]], seq_len: int, eos_id: int) -> torch.Tensor:
    """``EOS d1 EOS d2 ...`` cut into rows of ``seq_len`` (in memory: the reference for :class:`StreamRows`)."""
    _check_seq_len(seq_len)
    pieces = []
    for doc in token_id_lists:
        if len(doc):
            pieces += [np.array([eos_id], dtype=np.int64), np.asarray(doc, dtype=np.int64).ravel()]
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return StreamRows(stream, seq_len)[:]


def _check_seq_len(seq_len: int, wrapped: bool = False) -> None:
    if wrapped and seq_len < 3:  # pack_sequences' rule and message
        raise ConfigError(f"seq_len={seq_len} is too short to pack: a row needs [CLS], a token and [SEP]")
    if seq_len < 2:
        raise ConfigError(f"seq_len={seq_len} is too short for causal LM rows (a token and its successor)")


def stream_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type holding every id (uint16 for Pythia's 50,277 tokens)."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def streamable(tokenizer) -> bool:
    """Whether :func:`token_stream` can cache this tokenizer's stream: token_cache.cache_key fingerprints
    the tokenizers with a serialised form (``to_str``: a tokenizers.Tokenizer); ch. 2's codebook ones have
    none. Asked without hashing the split, which cache_key would (minutes for a corpus without DIGESTS.json)."""
    return callable(getattr(tokenizer, "to_str", None))


class StreamRows:
    """The rows of a (memory-mapped) token stream, as int64 tensors.

    Without ``wrap``: rows of ``seq_len`` consecutive tokens (end-of-text packing). With ``wrap = (cls_id,
    sep_id)``: bodies of ``seq_len - 2`` consecutive tokens, each returned as ``[CLS] body [SEP]``
    ([CLS]/[SEP] packing; the stream never stores the wrapping). Supports what the pretraining batches use
    of a packed ``(N, seq_len)`` tensor: ``len``, ``shape``, indexing by an int, a slice, or a tensor, array
    or list of row numbers; only the rows asked for are read. ``lookup`` maps the stream's ids as they are
    read (``lookup[id]``: ch. 2's hashed pieces, subword ids to codebook rows).
    """

    def __init__(self, stream: np.ndarray, seq_len: int, wrap: tuple[int, int] | None = None,
                 lookup: np.ndarray | None = None):
        _check_seq_len(seq_len, wrapped=wrap is not None)
        body = seq_len - 2 if wrap is not None else seq_len
        n_rows = len(stream) // body
        self.seq_len, self.wrap = seq_len, wrap
        self.lookup = None if lookup is None else np.asarray(lookup, dtype=np.int64)
        self.rows = np.asarray(stream)[: n_rows * body].reshape(n_rows, body)

    def __len__(self) -> int:
        return self.rows.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.seq_len)

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        body = self.rows[index]
        if self.lookup is not None:
            body = self.lookup[body]
        if self.wrap is None:
            return torch.from_numpy(np.array(body, dtype=np.int64))
        out = np.empty(body.shape[:-1] + (self.seq_len,), dtype=np.int64)
        out[..., 0], out[..., -1] = self.wrap
        out[..., 1:-1] = body
        return torch.from_numpy(out)


def _text_chunks(path: Path) -> Iterator[list[str]]:
    """The split's texts, ENCODE_CHUNK at a time (never the whole split in memory)."""
    chunk: list[str] = []
    for row in iter_jsonl(path):  # a damaged line: DataError naming file and line
        chunk.append(row["text"])
        if len(chunk) == ENCODE_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_stream(tokenizer, path: Path, separator_id: int, dtype: np.dtype, target: Path, desc: str,
                  leading: bool = True) -> tuple[int, str]:
    """Write the split's documents to ``target`` separated by ``separator_id`` (also before the first
    one when ``leading``); return the number of tokens written and the SHA-256 of the bytes."""
    separator = np.array([separator_id], dtype=dtype)
    written, need_separator = 0, leading
    digest = hashlib.sha256()
    with atomic_path(target, suffix=target.suffix) as tmp, open(tmp, "wb") as out:
        for number, texts in enumerate(_text_chunks(path)):
            pieces = []
            for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
                if encoding.ids:
                    if need_separator:
                        pieces.append(separator)
                    pieces.append(np.asarray(encoding.ids, dtype=dtype))
                    need_separator = True
            if pieces:
                block = np.concatenate(pieces)
                out.write(block.tobytes())
                digest.update(block.tobytes())
                written += block.size
            if number % 100 == 99:
                log.info("%s: %d documents, %d tokens so far", desc, (number + 1) * ENCODE_CHUNK, written)
    return written, digest.hexdigest()


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


# Streams whose bytes matched their record's SHA-256, by (path, inode, size, mtime): a job checks its
# stream once, not at every call (a paper-scale stream is GBs).
_VERIFIED: dict[tuple, bool] = {}


def _stream_problem(target: Path, dtype: np.dtype) -> str | None:
    """Why the cached stream ``target`` cannot be used (None: it is complete and intact). Its record
    holds its length and the SHA-256 of its bytes: a stream overwritten with bytes of the right size
    (ids past the vocabulary, an IndexError in the embedding; or wrong ids that train silently) is caught
    here, before training, as is a truncated one or one from before records held a checksum."""
    if not target.is_file():
        return "it is missing"
    try:
        record = json.loads(_record_path(target).read_text(encoding="utf-8"))
        tokens, sha256 = int(record["tokens"]), str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"its record {_record_path(target).name} is missing, unreadable or has no length and checksum"
    stat = target.stat()
    if tokens * dtype.itemsize != stat.st_size:
        return f"its size ({stat.st_size} bytes) disagrees with its record ({tokens} tokens): truncated or damaged"
    if not bytes_match(target, sha256):
        return "its bytes do not match the SHA-256 its record holds: overwritten or damaged"
    return None


def bytes_match(target: Path, sha256: str) -> bool:
    """Whether the stream ``target`` has the SHA-256 ``sha256``; computed once per job and file state."""
    stat = target.stat()
    key = (str(target), stat.st_ino, stat.st_size, stat.st_mtime_ns, sha256)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_file(target) == sha256
    return _VERIFIED[key]


def _cached_tokens(target: Path, dtype: np.dtype) -> int | None:
    """The length of a complete, intact cached stream, or None (then it is built, or rebuilt)."""
    if _stream_problem(target, dtype) is not None:
        return None
    return int(json.loads(_record_path(target).read_text(encoding="utf-8"))["tokens"])


def token_stream(tokenizer, path: str | Path, separator_id: int, desc: str, packing: str = "eos") -> np.ndarray:
    """The documents of the corpus split ``path`` joined by ``separator_id`` as a read-only memory map,
    built once and cached: ``EOS d1 EOS d2 ...`` for ``packing="eos"``, ``d1 SEP d2 ...`` for ``"sep"``."""
    path = Path(path)
    if packing not in LEADING_SEPARATOR:
        raise ConfigError(f"unknown packing {packing!r}; expected one of {sorted(LEADING_SEPARATOR)}")
    if not path.is_file():
        raise DataError(f"corpus split {path} is missing; run the data stage first (`snakemake data` or `dvc repro`)")
    key = cache_key(tokenizer, path)
    if key is None:
        raise DataError(f"{desc}: streamed packing needs a tokenizers.Tokenizer (one that can be fingerprinted)")
    dtype = stream_dtype(tokenizer.get_vocab_size(with_added_tokens=True))
    target = paths.cache_dir() / "tokenized" / f"{key}-{packing}{separator_id}.{packing}.{dtype.name}"
    def build() -> None:
        if target.is_file():  # (under the lock: no other process is writing it)
            log.warning("the cached token stream %s cannot be used: %s; tokenising %s again", target,
                        _stream_problem(target, dtype), path)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        tokens, sha256 = _write_stream(tokenizer, path, separator_id, dtype, target, desc, LEADING_SEPARATOR[packing])
        write_json(_record_path(target), {"tokens": tokens, "sha256": sha256, "dtype": dtype.name, "packing": packing,
                                          "separator_id": separator_id, "split": path.name})
        log.info("%s: %d tokens of %s written to %s", desc, tokens, path.name, target)

    # Concurrent pretraining jobs on one split (ch. 4's runs all read SlimPajama) tokenise it once: the
    # others wait for the first and map its stream.
    if not build_once(target, build, f"the token stream of {path}",
                      done=lambda: _stream_problem(target, dtype) is None):
        log.info("%s: token stream of %s from the cache %s", desc, path.name, target)
    tokens = _cached_tokens(target, dtype)
    if tokens is None:  # damaged again between its check and now
        raise DataError(f"the token stream {target} of {path} cannot be used: {_stream_problem(target, dtype)}; "
                        f"delete it and run the job again")
    if tokens == 0:  # (an empty file cannot be memory-mapped)
        return np.zeros(0, dtype=dtype)
    return np.memmap(target, dtype=dtype, mode="r", shape=(tokens,))


def _packed_rows(tokenizer, path, seq_len: int, separator_id: int, desc: str, packing: str,
                 wrap: tuple[int, int] | None) -> StreamRows:
    _check_seq_len(seq_len, wrapped=wrap is not None)  # before tokenising the corpus, not after
    rows = StreamRows(token_stream(tokenizer, path, separator_id, desc, packing), seq_len, wrap)
    if len(rows) == 0:
        raise DataError(f"{path}: no full sequence of {seq_len} tokens could be packed; the corpus is too small")
    return rows


def eos_packed_rows(tokenizer, path: str | Path, seq_len: int, eos_id: int, desc: str) -> StreamRows:
    """The split packed as ``EOS d1 EOS d2 ...`` rows of ``seq_len`` (DataError when none is full)."""
    return _packed_rows(tokenizer, path, seq_len, eos_id, desc, "eos", None)


def sep_packed_rows(tokenizer, path: str | Path, seq_len: int, cls_id: int, sep_id: int, desc: str) -> StreamRows:
    """The split packed as :func:`~leanlm.training.objectives.pack_sequences` packs it, ``[CLS] body [SEP]``
    rows from the stream ``d1 SEP d2 ...`` (DataError when none is full)."""
    return _packed_rows(tokenizer, path, seq_len, sep_id, desc, "sep", (cls_id, sep_id))
