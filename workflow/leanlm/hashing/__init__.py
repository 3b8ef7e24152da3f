"""Chapter 2's token hashing: the data side of HashFormers, ProFormer and EELBERT.

- :mod:`~leanlm.hashing.words`: word tokenisation with an unlimited vocabulary (and BPE pieces);
- :mod:`~leanlm.hashing.md5`: HMAC-MD5 buckets and bits (HashFormers-MD);
- :mod:`~leanlm.hashing.lsh`: character n-gram LSH buckets and bits (HashFormers-LSH, ProFormer);
- :mod:`~leanlm.hashing.codebook`: :class:`HashCodebook`, token rows with precomputed hashes,
  whose ``features(ids, names)`` are what the embeddings of
  :mod:`leanlm.modeling.hash_embeddings` read.
"""

from leanlm.hashing.codebook import HashCodebook
from leanlm.hashing.lsh import LSHHasher, NgramVocabulary
from leanlm.hashing.md5 import MD5Hasher
from leanlm.hashing.words import SPECIAL_TOKENS, piece_tokenizer, word_tokenize

__all__ = ["HashCodebook", "LSHHasher", "NgramVocabulary", "MD5Hasher", "SPECIAL_TOKENS",
           "piece_tokenizer", "word_tokenize"]
