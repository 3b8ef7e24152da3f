"""The key of a corpus split's cached token stream: which tokenizer read which bytes.

Every pretraining job of a profile tokenises the same corpus split with the same tokenizer; on the
smoke profile that was 10-20 s of each job's ~45 s, at the paper's scale hours. So the token stream is
built once and cached (:mod:`leanlm.training.eos_packing`, under ``<cache_dir>/tokenized/``), keyed by a
hash of the tokenizer's serialised form and of the split file's bytes, so a changed corpus or tokenizer
can never be served stale ids. The cache lives outside ``data/`` (DVC's outputs). Tokenizers without a
serialised form (ch. 2's codebook tokenizers) have no key and are not cached. A split's hash is read from
the DIGESTS.json its stage wrote beside it when there is one (named corpora such as SlimPajama: tens of
GB that every job would otherwise hash again), else computed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from leanlm.io import sha256_file

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
