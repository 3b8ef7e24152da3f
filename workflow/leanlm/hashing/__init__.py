"""Chapter 2's token hashing: the data side of HashFormers, ProFormer and EELBERT, and the route a hash
run's text takes into its model (one wing: the ch. 2 pretraining path stays in this folder, apart from
the embeddings themselves, :mod:`leanlm.modeling.hash_embeddings` and ``projection_embeddings``, and
what they ask of their inputs, :mod:`leanlm.modeling.hash_features`).

- :mod:`~leanlm.hashing.words`: word tokenisation with an unlimited vocabulary (and BPE pieces);
- :mod:`~leanlm.hashing.md5`: HMAC-MD5 buckets and bits (HashFormers-MD);
- :mod:`~leanlm.hashing.lsh`: character n-gram LSH buckets and bits (HashFormers-LSH, ProFormer);
- :mod:`~leanlm.hashing.codebook`: :class:`HashCodebook`, token rows with precomputed hashes,
  whose ``features(ids, names)`` are what the hash embeddings read
  (:func:`leanlm.modeling.hash_features.embedding_features`);
- :mod:`~leanlm.hashing.inputs`: how a hash run's text becomes model inputs (packing, features), behind
  the hashing input route (:mod:`leanlm.routes.hashing`; which runs take it: :func:`leanlm.runs.uses_codebook`);
- :mod:`~leanlm.hashing.codebook_streams`: the codebook corpora as memory-mapped row-id streams.
- :mod:`~leanlm.hashing.official_replacements`: Shuffle+Random's random inputs of the official code's hash
  models (``corruption: official_code``).

Names are imported lazily, so the NumPy-only hashers load without torch (a data-preparation
process, or a subprocess in the tests, need not pay for it).
"""

from importlib import import_module

_EXPORTS = {
    "HashCodebook": "leanlm.hashing.codebook",
    "LSHHasher": "leanlm.hashing.lsh",
    "NgramVocabulary": "leanlm.hashing.lsh",
    "MD5Hasher": "leanlm.hashing.md5",
    "SPECIAL_TOKENS": "leanlm.hashing.words",
    "piece_tokenizer": "leanlm.hashing.words",
    "word_tokenize": "leanlm.hashing.words",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'leanlm.hashing' has no attribute {name!r}")
