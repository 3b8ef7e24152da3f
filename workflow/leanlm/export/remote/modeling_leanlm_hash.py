"""Ch. 2's word embeddings without a table per token, for ``modeling_leanlm_ch3.py``'s BERT.

Copied verbatim into every ch. 3 export by ``leanlm export-hf`` (``trust_remote_code``); it imports only
torch. Parameter names are leanlm's. ``config.embedding`` names the embedding and
``config.embedding_options`` holds its settings, the defaults filled in by the export:

- the HashFormers (thesis §2.3.1), from a token's hash: ``hash_emb`` (a table indexed by the hash bucket),
  ``hash_pool`` (Eq. 2.1: codewords of k bits index a shared codebook, weighted by a softmax over
  codewords), ``hash_add`` (Eq. 2.2: one of two vectors per bit, summed and scaled), ``hash_proj``
  (Eq. 2.3: the Pearson correlation of the bits with one learned vector per hidden dimension);
- ``proformer``: the LSH bits in {-1, +1} through a linear layer;
- ``eelbert``: no learned table, a fixed function of the rolling hashes of the token's character n-grams;
- ``bert_hash`` (NeuML): a narrow table per vocabulary token, projected to the hidden size.

All but ``bert_hash`` read a feature of each token (:data:`FEATURES`) that the export's tokenizer
(``tokenization_leanlm_hash.py``) computes from the token's text and returns beside ``input_ids``. Ids below
``special_tokens`` are the special tokens ([PAD] [UNK] [CLS] [SEP] [MASK]), embedded from a small table of
their own; the HashFormers add one learned "regular token" vector to every other token.
"""

import math

import torch
from torch import nn

# The per-token inputs a hash embedding reads, passed to the model by name (as the tokenizer returns them).
FEATURES = ("hash_bits", "hash_buckets", "char_ngram_hashes")


class HashEmbedding(nn.Module):
    """Special-token rows, the shared regular-token vector, and ``embed_hashed(feature)`` for the others."""

    feature = "hash_bits"
    regular = True

    def __init__(self, config):
        super().__init__()
        self.options = config.embedding_options
        self.n_special = self.options["special_tokens"]
        self.special_tokens = nn.Embedding(self.n_special, config.d_model, padding_idx=config.pad_token_id)
        if self.regular:
            self.regular_token = nn.Parameter(torch.zeros(config.d_model))

    def forward(self, input_ids, **features):
        if self.feature not in features:
            raise ValueError(f"embedding {type(self).__name__} reads {self.feature!r}, which the export's "
                             f"tokenizer returns beside input_ids: pass model(**tokenizer(texts, return_tensors='pt'))")
        hashed = self.embed_hashed(features[self.feature])
        if self.regular:
            hashed = hashed + self.regular_token
        specials = self.special_tokens(input_ids.clamp(max=self.n_special - 1))
        return torch.where((input_ids < self.n_special)[..., None], specials, hashed)


class HashEmb(HashEmbedding):
    feature = "hash_buckets"

    def __init__(self, config):
        super().__init__(config)
        self.buckets = nn.Embedding(self.options["buckets"], config.d_model)

    def embed_hashed(self, buckets):
        return self.buckets(buckets)


class HashPool(HashEmbedding):
    """e = sum_j B[c_j] * softmax_j(W), the bits read k at a time (most significant first) as codewords c_j."""

    def __init__(self, config):
        super().__init__(config)
        self.n_bits, self.k = self.options["bits"], self.options["k"]
        n_codes = math.ceil(self.n_bits / self.k)
        self.codebook = nn.Embedding(2 ** self.k, config.d_model)
        self.codeword_weights = nn.Parameter(torch.zeros(n_codes, config.d_model))

    def embed_hashed(self, bits):
        # The codeword of bits [jk, (j+1)k) (the last one shorter), computed in int64: exact.
        bits = bits.long()
        codes = []
        for start in range(0, self.n_bits, self.k):
            chunk = bits[..., start:start + self.k]
            powers = 2 ** torch.arange(chunk.size(-1) - 1, -1, -1, device=bits.device)
            codes.append((chunk * powers).sum(-1))
        weights = self.codeword_weights.softmax(dim=0)  # [C, d]: over codewords, per hidden dimension
        return (self.codebook(torch.stack(codes, dim=-1)) * weights).sum(dim=-2)


class HashAdd(HashEmbedding):
    """e = sum_j B^j[bit_j] / gamma (gamma = sqrt(T), or T with ``scale: mean``)."""

    def __init__(self, config):
        super().__init__(config)
        self.n_bits = self.options["bits"]
        self.gamma = math.sqrt(self.n_bits) if self.options["scale"] == "sqrt" else float(self.n_bits)
        self.codebooks = nn.Parameter(torch.zeros(self.n_bits, 2, config.d_model))

    def embed_hashed(self, bits):
        zero, one = self.codebooks[:, 0], self.codebooks[:, 1]
        return (zero.sum(0) + torch.matmul(bits.to(one.dtype), one - zero)) / self.gamma


class HashProj(HashEmbedding):
    """e_i = Pearson(bits, w_i); a bit vector without variance correlates 0 with everything."""

    eps = 1e-8

    def __init__(self, config):
        super().__init__(config)
        self.axes = nn.Parameter(torch.zeros(config.d_model, self.options["bits"]))

    def embed_hashed(self, bits):
        bits = bits.to(self.axes.dtype)
        bits = bits - bits.mean(-1, keepdim=True)
        bits = bits / bits.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        axes = self.axes - self.axes.mean(-1, keepdim=True)
        axes = axes / axes.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return torch.matmul(bits, axes.t())


class ProFormer(HashEmbedding):
    regular = False

    def __init__(self, config):
        super().__init__(config)
        self.projection = nn.Linear(self.options["bits"], config.d_model)

    def embed_hashed(self, bits):
        return self.projection(2.0 * bits.to(self.projection.weight.dtype) - 1.0)


class EELBERT(HashEmbedding):
    """Hidden dimensions in blocks, one per n-gram length n (about n / (1 + ... + N) of them); a dimension's
    value is the mean over the token's n-grams of (s * h) mod b mapped to [-1, 1), s the n-gram's rolling
    hash (-1: none), h the dimension's fixed seed (``hash_seeds``, shipped with the weights)."""

    feature = "char_ngram_hashes"
    regular = False

    def __init__(self, config):
        super().__init__(config)
        self.n_max, self.modulus = self.options["ngram"], self.options["modulus"]
        self.register_buffer("hash_seeds", torch.zeros(config.d_model, dtype=torch.int64))
        total = self.n_max * (self.n_max + 1) // 2
        ends = [round(config.d_model * sum(range(1, n + 1)) / total) for n in range(1, self.n_max)]
        self.bounds = [0, *ends, config.d_model]

    def embed_hashed(self, hashes):
        b, blocks = self.modulus, []
        for n in range(self.n_max):
            seeds = self.hash_seeds[self.bounds[n]:self.bounds[n + 1]]
            s = hashes[..., n, :]  # [..., max_chars]
            valid = s >= 0
            p = (s.clamp_min(0)[..., None] * seeds) % b
            p = (p - (p > b // 2).long() * b).double() / (b / 2) * valid[..., None]
            blocks.append(p.sum(-2) / valid.sum(-1, keepdim=True).clamp_min(1))
        return torch.cat(blocks, dim=-1).float().to(self.special_tokens.weight.dtype)


class BertHash(nn.Module):
    """NeuML BERT-Hash: a ``projections``-wide vector per vocabulary token, times a matrix without bias."""

    def __init__(self, config):
        super().__init__()
        n = config.embedding_options["projections"]
        self.tokens = nn.Embedding(config.vocab_size, n, padding_idx=config.pad_token_id)
        self.projection = nn.Linear(n, config.d_model, bias=False)

    def forward(self, input_ids, **features):
        return self.projection(self.tokens(input_ids))


EMBEDDINGS = {"hash_emb": HashEmb, "hash_pool": HashPool, "hash_add": HashAdd, "hash_proj": HashProj,
              "proformer": ProFormer, "eelbert": EELBERT, "bert_hash": BertHash}
