"""Token ids of a corpus split, cached across jobs.

Every pretraining job of a profile tokenises the same corpus split with the same tokenizer; on the
smoke profile that was 10-20 s of each job's ~45 s. The ids are cached under
``<cache_dir>/tokenized/<key>.npz``, the key being a hash of the tokenizer's serialised form and of the
split file's bytes, so a changed corpus or tokenizer can never be served stale ids. The cache lives
outside ``data/`` (DVC's outputs) and is written atomically, so concurrent jobs at worst both write it.
Tokenizers without a serialised form (ch. 2's codebook tokenizers) are not cached. A split's hash is
read from the DIGESTS.json its stage wrote beside it when there is one (named corpora such as SlimPajama:
tens of GB that every job would otherwise hash again), else computed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from leanlm import paths
from leanlm.io import atomic_path, sha256_file
from leanlm.training.text_batches import read_documents, tokenize_documents

log = logging.getLogger(__name__)



def split_digest(path: Path) -> str:
    """SHA-256 of a corpus split: the one recorded in DIGESTS.json beside it (for the same byte size:
    leanlm.data.pretrain_data writes it with the split), else computed from the file."""
    path = Path(path)
    recorded = path.parent / "DIGESTS.json"
    if recorded.is_file():
        try:
            entry = json.loads(recorded.read_text(encoding="utf-8")).get(path.name) or {}
        except (OSError, ValueError):
            entry = {}
        if entry.get("sha256") and entry.get("bytes") == path.stat().st_size:
            return str(entry["sha256"])
    return sha256_file(path)


def cache_key(tokenizer, path: Path) -> str | None:
    """Hash of (tokenizer, split file), or None for a tokenizer that cannot be fingerprinted."""
    to_str = getattr(tokenizer, "to_str", None)
    if not callable(to_str):
        return None
    digest = hashlib.sha256(to_str().encode("utf-8"))
    digest.update(split_digest(path).encode("ascii"))
    return digest.hexdigest()[:32]


def corpus_token_ids(tokenizer, path: str | Path, desc: str) -> list[list[int]]:
    """Token ids of each document of the corpus split ``path`` (no special tokens), from the cache
    when this tokenizer has tokenised this exact file before."""
    path = Path(path)
    key = cache_key(tokenizer, path) if path.is_file() else None
    if key is None:  # (a missing split gets read_documents' clear error)
        return tokenize_documents(tokenizer, read_documents(path), desc=desc)
    target = paths.cache_dir() / "tokenized" / f"{key}.npz"
    if target.is_file():
        try:
            with np.load(target) as stored:
                ids, lengths = stored["ids"], stored["lengths"]
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            log.info("%s: token ids of %s from the cache %s", desc, path.name, target)
            return [ids[bounds[i]:bounds[i + 1]].tolist() for i in range(len(lengths))]
        except (OSError, ValueError, KeyError) as exc:  # a damaged cache entry is rebuilt, not trusted
            log.warning("ignoring the unreadable token cache %s (%s); tokenising again", target, exc)
    docs = tokenize_documents(tokenizer, read_documents(path), desc=desc)
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    ids = np.fromiter((t for d in docs for t in d), dtype=np.int32, count=int(lengths.sum()))
    with atomic_path(target, suffix=".npz") as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, ids=ids, lengths=lengths)
    return docs
