"""Shuffle+Random's random replacements as the official HashFormers code makes them for its hash models.

Under ``pretrain.shuffle_random.corruption: official_code`` (docs/design-notes.md, "Shuffle+Random
collator"). The official code (GitHub HUIYINXUE/hashformer, ``src/model/data_collator.py``) has three
collators. The plain one, for models that read token ids (its Emb), replaces a token by an id drawn
uniformly from the whole vocabulary, special ids included. The official Emb's vocabulary is its word
table: ids 0-4 RoBERTa's special tokens, a regular token written as its bucket + 5 (50,265 ids for 50,260
buckets). So a replaced token becomes one of the N + 5 (special id, bucket) uniformly, whatever the
corpus's words; ours, whose ids are codebook rows, would otherwise draw a random row, i.e. a corpus word's
bucket (a special id 5 times in as many rows as the codebook has). :class:`OfficialRandomBuckets` draws
the official way. The two collators for models that read a token's hash directly do not draw a word at all:

- ``DataCollatorForShuffleRandomThreeWayClassification_Proj`` (128-bit inputs: Add, ``RobertaProjEmbeddingsDE``,
  and Proj, ``RobertaProjEmbeddingsPCC``): ``random_bitarrays`` draws a density u ~ U(0, 1) per replaced
  token and then each of its bits ~ Bernoulli(u). Its density is uniform, where a real word's code has
  density near 0.5: about 70% of these vectors have density outside [0.35, 0.65], which makes telling a
  replaced token from an original much easier than with a random word's code.
- ``..._Conj`` (codeword indices: Pool, ``RobertaConjEmbeddings``): ``random_indarrays`` draws each of the 13
  codewords uniformly (12 of 10 bits, the last of 8, each + 1 past the padding row 0). Uniform independent
  codewords are uniform independent bits, which is how ours, whose Pool reads bits, draws them (for any
  ``k``). A random codeword is, almost surely, no word's code.

In both, the replaced token's id stays its own: the collators' ids only tell special tokens from regular
ones (``spec_ind``), and a replaced token is a regular one. :class:`OfficialRandomInputs` does this to a
batch once its features are gathered (:class:`leanlm.hashing.inputs.FeatureBatches`), as
:class:`OfficialRandomBuckets` does for Emb.
"""

from __future__ import annotations

from typing import Callable

import torch

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embedding_options import read_options
from leanlm.modeling.hash_features import codebook_settings
from leanlm.modeling.variants import EMBEDDINGS
from leanlm.training.shuffle_random import RANDOM

Draw = Callable[[int, int, torch.Generator], torch.Tensor]


def random_bit_vectors(n: int, n_bits: int, generator: torch.Generator) -> torch.Tensor:
    """``[n, n_bits]`` in {0, 1}: the official ``random_bitarrays`` (a density ~U(0, 1) per vector, then
    Bernoulli bits), drawn from ``generator`` only."""
    density = torch.rand(n, 1, generator=generator, device=generator.device)
    return torch.bernoulli(density.expand(n, n_bits), generator=generator)


def random_codewords(n: int, n_bits: int, generator: torch.Generator) -> torch.Tensor:
    """``[n, n_bits]`` in {0, 1}: uniformly random codewords (the official ``random_indarrays``), as bits."""
    return torch.randint(0, 2, (n, n_bits), generator=generator, device=generator.device).float()


# Our embedding -> the draw of the official collator its official module was trained with.
OFFICIAL_RANDOM_INPUTS: dict[str, Draw] = {
    "hash_add": random_bit_vectors,
    "hash_proj": random_bit_vectors,
    "hash_pool": random_codewords,
}


class OfficialRandomInputs:
    """``(rows, batch, generator)``: at the tokens ``batch["labels"]`` marks random, put the uncorrupted
    token back in ``input_ids`` and random official inputs in ``hash_bits`` (in place, after the batch's
    other draws, as the collator draws them last)."""

    def __init__(self, draw: Draw):
        self.draw = draw

    def __call__(self, rows: torch.Tensor, batch: dict, generator: torch.Generator) -> dict:
        at = batch["labels"] == RANDOM
        batch["input_ids"] = torch.where(at, rows.to(batch["input_ids"].device), batch["input_ids"])
        bits = batch["hash_bits"]
        bits[at] = self.draw(int(at.sum()), bits.size(-1), generator).to(bits.device, bits.dtype)
        return batch


class OfficialRandomBuckets:
    """``(rows, batch, generator)`` for Emb: at the tokens ``batch["labels"]`` marks random, an id drawn
    uniformly from the official Emb's vocabulary, the ``n_special`` special ids and the ``n_buckets``
    buckets: a special id becomes the token (its embedding is the special row's), a bucket the token's
    ``hash_buckets`` with the uncorrupted token, a regular one, back in ``input_ids`` (in place, after the
    batch's other draws, as :class:`OfficialRandomInputs`)."""

    def __init__(self, n_special: int, n_buckets: int):
        self.n_special, self.n_buckets = n_special, n_buckets

    def __call__(self, rows: torch.Tensor, batch: dict, generator: torch.Generator) -> dict:
        at = batch["labels"] == RANDOM
        ids, buckets = batch["input_ids"], batch["hash_buckets"]
        drawn = torch.randint(self.n_special + self.n_buckets, (int(at.sum()),), generator=generator,
                              device=generator.device).to(ids.device)
        special = drawn < self.n_special
        ids[at] = torch.where(special, drawn, rows.to(ids.device)[at]).to(ids.dtype)
        # a special token's bucket is the codebook's 0 (its embedding never reads it)
        buckets[at] = torch.where(special, 0, drawn - self.n_special).to(buckets.device, buckets.dtype)
        return batch


def official_random_inputs(config: ModelConfig) -> OfficialRandomInputs | OfficialRandomBuckets | None:
    """The official code's replacement for the model's embedding; None where it replaces by a random word
    (ProFormer, EELBERT and BERT-Hash, which the official code lacks, and the models that read ids)."""
    if config.embedding == "hash_emb":
        options = read_options(config, EMBEDDINGS.get(config.embedding).defaults)
        return OfficialRandomBuckets(options["special_tokens"], codebook_settings(config)["n_buckets"])
    draw = OFFICIAL_RANDOM_INPUTS.get(config.embedding)
    return None if draw is None else OfficialRandomInputs(draw)
