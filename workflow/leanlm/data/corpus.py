"""The pretraining corpus: clean documents -> corpus/{train,validation,test}.jsonl + STATS.json.

One document per line, ``{"doc_id": str, "source": str, "text": str}``. A document's split is a hash
of its doc_id and ``data.corpus.split_seed`` (:func:`leanlm.data.splitting.assign_split`), so adding
or removing other documents never moves it. Empty documents and duplicates (same text up to case and
spacing) are dropped; the first copy, in source order, is kept.

STATS.json::

    {"splits": {"train": {"documents", "characters", "words"}, "validation": {...}, "test": {...}},
     "total": {...}, "by_source": {source: {"documents", "characters", "words"}},
     "dropped": {"empty": n, "duplicate": n}, "split_seed", "validation_fraction", "test_fraction"}

Words are whitespace-separated (tokenizer-independent). The writer streams, so the hub corpus
(Wikipedia + BookCorpus) goes through the same code as the packaged one.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Iterable

from leanlm.data.sources.packaged_raw import Document
from leanlm.data.splitting import SPLITS, assign_split, unit_interval
from leanlm.data.text import count_words, dedupe_key
from leanlm.errors import ConfigError, DataError
from leanlm.io import atomic_path, iter_jsonl, write_json

log = logging.getLogger(__name__)


def _counts() -> dict[str, int]:
    return {"documents": 0, "characters": 0, "words": 0}


def _add(counts: dict[str, int], text: str) -> None:
    counts["documents"] += 1
    counts["characters"] += len(text)
    counts["words"] += count_words(text)


def check_fractions(validation_fraction: float, test_fraction: float) -> None:
    if not (0 <= validation_fraction < 1 and 0 <= test_fraction < 1 and validation_fraction + test_fraction < 1):
        raise ConfigError(
            f"data.corpus: validation_fraction={validation_fraction} and test_fraction={test_fraction} must be "
            f"in [0, 1) and leave something for train (their sum is {validation_fraction + test_fraction})"
        )


def sample_documents(documents: Iterable[Document], max_documents: int | None, seed: int) -> list[Document]:
    """At most ``max_documents`` documents, a uniform sample chosen by hash (order kept)."""
    documents = list(documents)
    if max_documents is None or len(documents) <= max_documents:
        return documents
    ranked = sorted(range(len(documents)), key=lambda i: unit_interval(seed, "sample", documents[i].doc_id))
    keep = set(ranked[:max_documents])
    return [d for i, d in enumerate(documents) if i in keep]


def build_corpus(
    documents: Iterable[Document],
    out_dir: Path,
    *,
    validation_fraction: float,
    test_fraction: float,
    split_seed: int,
) -> dict:
    """Write the three split files and STATS.json into ``out_dir``; return the stats."""
    check_fractions(validation_fraction, test_fraction)
    out_dir = Path(out_dir)
    splits = {s: _counts() for s in SPLITS}
    by_source: dict[str, dict[str, int]] = {}
    dropped = {"empty": 0, "duplicate": 0}
    seen: set[bytes] = set()
    with contextlib.ExitStack() as stack:
        handles = {}
        for split in SPLITS:
            tmp = stack.enter_context(atomic_path(out_dir / f"{split}.jsonl"))
            handles[split] = stack.enter_context(open(tmp, "w", encoding="utf-8"))
        for doc in documents:
            if not doc.text.strip():
                dropped["empty"] += 1
                continue
            # 8 bytes of the key per document: enough to tell millions of documents apart.
            key = bytes.fromhex(dedupe_key(doc.text)[:16])
            if key in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(key)
            split = assign_split(doc.doc_id, split_seed, validation_fraction, test_fraction, namespace="corpus")
            record = {"doc_id": doc.doc_id, "source": doc.source, "text": doc.text}
            handles[split].write(json.dumps(record, ensure_ascii=False) + "\n")
            _add(splits[split], doc.text)
            _add(by_source.setdefault(doc.source, _counts()), doc.text)
        for split, fraction in (("train", 1.0), ("validation", validation_fraction), ("test", test_fraction)):
            if fraction > 0 and splits[split]["documents"] == 0:
                total = sum(c["documents"] for c in splits.values())
                raise DataError(
                    f"the corpus has {total} documents and none fell into the {split} split "
                    f"(fraction {fraction}, split_seed {split_seed}); use more documents or a larger fraction"
                )
    total = _counts()
    for counts in splits.values():
        for k in total:
            total[k] += counts[k]
    stats = {
        "splits": splits,
        "total": total,
        "by_source": by_source,
        "dropped": dropped,
        "split_seed": split_seed,
        "validation_fraction": validation_fraction,
        "test_fraction": test_fraction,
    }
    write_json(out_dir / "STATS.json", stats)
    log.info("corpus: %d documents, %d words (%s dropped)", total["documents"], total["words"], dropped)
    return stats


def iter_corpus_texts(corpus_dir: Path, split: str = "train") -> Iterable[str]:
    """The texts of one corpus split, streamed (for tokenizer training and pretraining)."""
    path = Path(corpus_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise DataError(f"{path} is missing; run the corpus stage (`leanlm data corpus --params ...`) first")
    for row in iter_jsonl(path):  # a damaged line: DataError naming file and line
        yield row["text"]
