"""What a model's word embedding asks of its inputs: the batch features it reads and the codebook that makes them.

The data side (leanlm.hashing: the codebook, its streams, a hash run's inputs and tokenizer) and the memory
probe ask these of a model config; the answer comes from the variant ``config.embedding`` names (its
``features`` and ``defaults``), which the registry loads alone. Shared code, no variant: no stage imports a
variant module through here, so a job's code fingerprint holds only its model's embedding
(leanlm.modeling.variants).

Features (made by ``HashCodebook.features(ids, names, options)``, leanlm.hashing.codebook):

- ``hash_bits``: FloatTensor [B, L, T] in {0, 1}; ``hash_buckets``: LongTensor [B, L];
- ``char_ngram_hashes``: LongTensor [B, L, n, max_chars] (EELBERT, see projection_embeddings).
"""

from __future__ import annotations

from typing import Any

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embedding_options import positive_int, read_options
from leanlm.modeling.variants import EMBEDDINGS

# Named sizes of HashFormer-Emb (Table 2.2's "Emb (50K)" and "Emb (1K)").
EMB_BUCKETS = {"50K": 50_260, "1K": 1_037}


def embedding_features(config: ModelConfig) -> tuple[str, ...]:
    """Batch features the model's word embedding reads (empty for the standard lookup)."""
    # Read from the variant's source (its class or a base's literal), so asking imports no torch.
    return tuple(EMBEDDINGS.declared(config.embedding, "features"))


def codebook_settings(config: ModelConfig) -> dict[str, Any] | None:
    """What the data path's HashCodebook must make for this model: ``hash`` (md5 | lsh), ``n_bits``
    (T) and ``n_buckets`` (N, or None when no bucket is read); None when the embedding reads no
    feature (standard, bert_hash)."""
    cls = EMBEDDINGS.get(config.embedding)
    if not cls.features:
        return None
    options = read_options(config, cls.defaults)
    buckets = emb_buckets(options["buckets"], config) if "hash_buckets" in cls.features else None
    return {"hash": options.get("hash", "md5"), "n_bits": options.get("bits", 128), "n_buckets": buckets}


def emb_buckets(value: int | str, config: ModelConfig) -> int:
    """HashFormer-Emb's N from ``embedding_options.buckets``: an integer, "50K" or "1K"."""
    if isinstance(value, str):
        if value not in EMB_BUCKETS:
            raise ConfigError(f"model config: embedding_options.buckets={value!r} must be an "
                              f"integer or one of {sorted(EMB_BUCKETS)}")
        return EMB_BUCKETS[value]
    return positive_int({"buckets": value}, "buckets", config)
