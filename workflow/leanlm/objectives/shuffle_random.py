"""The ``shuffle_random`` pretraining objective (ch. 2): HashFormers and BERT-S+R.

Registered by its file name in :data:`leanlm.plugins.OBJECTIVES`; the shared runner
(:func:`~leanlm.stages.pretrain.pretrain_packed`) packs the corpus with the run's tokenizer (the
profile's subword tokenizer for BERT-S+R, a hash codebook of words or pieces for HashFormers: see
:mod:`leanlm.routes.hashing`, which also adds the hash features to every batch) and trains the
``shuffle_random`` head. The corruption is :func:`leanlm.training.shuffle_random.shuffle_random`:
about ``shuffle_prob`` of the non-special tokens of a row permuted among themselves and
``random_prob`` replaced by a uniformly drawn non-special token id (a codebook row for HashFormers),
labels original / shuffled / random, special tokens ignored (DESIGN §8); ``corruption: official_code``
corrupts as the official HashFormers code's collators do instead
(:func:`~leanlm.training.shuffle_random.shuffle_random_as_official_code`; for the HashFormers the random
tokens' inputs then become the collators' random inputs, bits for Add, Proj and Pool, a uniform id of the
official Emb's vocabulary for Emb: :mod:`leanlm.hashing.official_replacements`, applied by the hashing route
once the features are gathered).
``head`` picks the model's head (``bert``, the default, or the official code's ``official_code``:
:mod:`leanlm.modeling.shuffle_random`). Table 2.4's settings are the profile's ``pretrain.shuffle_random``
block.
"""

from __future__ import annotations

import torch

from leanlm.errors import ConfigError, DataError
from leanlm.stages.packed_batches import PackedBatches, special_token_ids
from leanlm.stages.pretrain import PackedTextObjective
from leanlm.training.shuffle_random import shuffle_random, shuffle_random_as_official_code

CORRUPTIONS = ("thesis", "official_code")


class NonSpecialSampler:
    """Uniform draws from the ids in ``[0, vocab_size)`` that are not special tokens."""

    def __init__(self, vocab_size: int, special_ids: list[int]):
        allowed = torch.ones(vocab_size, dtype=torch.bool)
        allowed[[i for i in special_ids if 0 <= i < vocab_size]] = False
        self.allowed = allowed.nonzero().squeeze(1)
        if self.allowed.numel() == 0:
            raise DataError(f"no token id in [0, {vocab_size}) is a regular token to draw replacements from")

    def __call__(self, shape: tuple, generator: torch.Generator) -> torch.Tensor:
        picks = torch.randint(len(self.allowed), shape, generator=generator, device=generator.device)
        return self.allowed.to(picks.device)[picks]


class ShuffleRandomBatches(PackedBatches):
    """Shuffle+Random over packed sequences (random access, as MLMBatches)."""

    def __init__(self, sequences: torch.Tensor, special_ids: list[int], vocab_size: int, batch_size: int,
                 grad_accum: int, shuffle_prob: float, random_prob: float, seed: int, corruption: str = "thesis"):
        super().__init__(sequences, batch_size, grad_accum, seed)
        if corruption not in CORRUPTIONS:
            raise ConfigError(f"pretrain.shuffle_random.corruption={corruption!r} must be one of {CORRUPTIONS}")
        self.special = torch.tensor(sorted(special_ids), dtype=torch.long)
        self.sampler = NonSpecialSampler(vocab_size, special_ids)
        self.vocab_size, self.corruption = vocab_size, corruption
        self.shuffle_prob, self.random_prob = shuffle_prob, random_prob

    def masked(self, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        special_mask = torch.isin(rows, self.special)
        if self.corruption == "official_code":
            inputs, labels = shuffle_random_as_official_code(rows, special_mask, generator, self.shuffle_prob,
                                                             self.random_prob, self.vocab_size)
        else:
            inputs, labels = shuffle_random(rows, special_mask, generator, self.shuffle_prob, self.random_prob,
                                            vocab_or_sampler=self.sampler)
        return {"input_ids": inputs, "labels": labels}  # packed rows: no padding, no attention_mask


class ShuffleRandomObjective(PackedTextObjective):
    head = "shuffle_random"
    metric = "shuffle_random"

    def batches(self, settings, tokenizer, sequences, seed):
        return ShuffleRandomBatches(sequences, special_token_ids(tokenizer), tokenizer.get_vocab_size(),
                                    settings["batch_size"], settings["grad_accum"],
                                    settings.get("shuffle_prob", 0.1), settings.get("random_prob", 0.1), seed,
                                    settings.get("corruption", "thesis"))

    def head_options(self, settings):
        # Only when the block sets it: a profile without the key builds the model exactly as before.
        return {"head_type": settings["head"]} if "head" in settings else {}


Objective = ShuffleRandomObjective
