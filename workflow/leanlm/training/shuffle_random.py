"""Shuffle+Random (S+R, Yamaguchi et al. 2021), ch. 2's pretraining objective (§2.3.6, DESIGN §8).

With an unlimited vocabulary there is no softmax over tokens to predict, so the model instead tells,
for every token, whether it is the original (0), was shuffled (1) or was replaced at random (2).
Of the non-special tokens of each row about ``shuffle_prob`` are picked and permuted among
themselves (within the row), and about ``random_prob`` others are replaced by random tokens.

Labels say what the input shows: a picked token that the permutation (or the random draw) left
equal to the original is labelled 0, since nothing about it changed. Special positions get -100.
Like ``mlm_mask`` it draws only from the given generator (``step_generator(seed, step, micro)``).
"""

from __future__ import annotations

from typing import Callable, Union

import torch

from leanlm.errors import ConfigError, DataError

IGNORE_INDEX = -100
ORIGINAL, SHUFFLED, RANDOM = 0, 1, 2

Sampler = Callable[[tuple, torch.Generator], torch.Tensor]
VocabOrSampler = Union[int, tuple, Sampler]


def _random_tokens(vocab_or_sampler: VocabOrSampler, shape: tuple, generator: torch.Generator,
                   dtype: torch.dtype) -> torch.Tensor:
    """Replacement tokens: ``int V`` -> uniform in [0, V); ``(low, high)`` -> uniform in [low, high);
    a callable ``(shape, generator) -> LongTensor`` (e.g. ``HashCodebook.random_ids``) -> its draw."""
    if callable(vocab_or_sampler):
        out = vocab_or_sampler(shape, generator)
        if tuple(out.shape) != tuple(shape):
            raise DataError(f"shuffle_random: the sampler returned shape {tuple(out.shape)}, "
                            f"expected {tuple(shape)}")
        return out.to(dtype)
    low, high = (0, vocab_or_sampler) if isinstance(vocab_or_sampler, int) else vocab_or_sampler
    if not 0 <= low < high:
        raise ConfigError(f"shuffle_random: replacement range [{low}, {high}) is empty")
    return torch.randint(low, high, shape, generator=generator, device=generator.device, dtype=dtype)


def shuffle_random(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    generator: torch.Generator,
    shuffle_prob: float = 0.1,
    random_prob: float = 0.1,
    *,
    vocab_or_sampler: VocabOrSampler,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt ``input_ids`` (B, L) for S+R; returns ``(corrupted_ids, labels)``.

    ``labels``: 0 original, 1 shuffled, 2 random, -100 where ``special_mask`` is True (mark padding
    there too). One uniform draw per position picks shuffle (u < shuffle_prob) or random
    (shuffle_prob <= u < shuffle_prob + random_prob), so the two sets never overlap.
    """
    if input_ids.dim() != 2 or input_ids.shape != special_mask.shape:
        raise DataError(f"shuffle_random: input_ids {tuple(input_ids.shape)} and special_mask "
                        f"{tuple(special_mask.shape)} must be the same (batch, length) shape")
    if not (0.0 <= shuffle_prob and 0.0 <= random_prob and shuffle_prob + random_prob < 1.0):
        raise ConfigError(f"shuffle_prob={shuffle_prob} and random_prob={random_prob} must be >= 0 "
                          f"with a sum below 1 (the thesis uses 0.1 and 0.1)")
    device, shape = input_ids.device, input_ids.shape
    draw = torch.rand(shape, generator=generator, device=generator.device).to(device)
    order_draw = torch.rand(shape, generator=generator, device=generator.device).to(device)
    replacement = _random_tokens(vocab_or_sampler, tuple(shape), generator, input_ids.dtype).to(device)

    eligible = ~special_mask.bool()
    to_shuffle = eligible & (draw < shuffle_prob)
    to_random = eligible & (draw >= shuffle_prob) & (draw < shuffle_prob + random_prob)

    # Permute the picked tokens within each row, all rows at once: list the picked positions of a
    # row first in position order (sort by index) and in a random order (sort by a random key); the
    # k-th position of the first list receives the token at the k-th of the second. Unpicked
    # positions sort after, in the same (index) order in both lists, so they map to themselves.
    length = shape[1]
    index = torch.arange(length, device=device).expand(shape).double()
    in_place = torch.where(to_shuffle, index, index + length).argsort(dim=1)
    shuffled_from = torch.where(to_shuffle, order_draw.double(), index + length).argsort(dim=1)
    corrupted = input_ids.clone()
    corrupted.scatter_(1, in_place, input_ids.gather(1, shuffled_from))
    corrupted = torch.where(to_random, replacement, corrupted)

    labels = torch.full_like(input_ids, ORIGINAL)
    changed = corrupted != input_ids
    labels[to_shuffle & changed] = SHUFFLED
    labels[to_random & changed] = RANDOM
    labels[~eligible] = IGNORE_INDEX
    return corrupted, labels


def shuffle_random_as_official_code(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    generator: torch.Generator,
    shuffle_prob: float,
    random_prob: float,
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """S+R as the official HashFormers code's collator corrupts (``corruption: official_code``; the
    differences from :func:`shuffle_random` are listed in docs/design-notes.md):

    - one permutation of the positions for the whole batch; where it brings a special token, the
      position keeps its own token;
    - each non-special position takes its permuted token with probability ``shuffle_prob`` (label 1,
      even when the token is the same), then each other non-special position a uniform id of the whole
      vocabulary (special ids included) with probability ``random_prob`` (label 2, likewise);
    - labels 0 elsewhere, -100 at special positions.

    This is the official code's plain collator, for the models that read ids; for the HashFormers (the bit
    models, and Emb, whose ids are buckets + 5 in the code) the hashing route then replaces the random tokens'
    inputs (:mod:`leanlm.hashing.official_replacements`).
    """
    if input_ids.dim() != 2 or input_ids.shape != special_mask.shape:
        raise DataError(f"shuffle_random: input_ids {tuple(input_ids.shape)} and special_mask "
                        f"{tuple(special_mask.shape)} must be the same (batch, length) shape")
    if not (0.0 <= shuffle_prob < 1.0 and 0.0 <= random_prob < 1.0):
        raise ConfigError(f"shuffle_prob={shuffle_prob} and random_prob={random_prob} must lie in [0, 1)")
    device, shape = input_ids.device, input_ids.shape
    special = special_mask.bool()
    order = torch.randperm(shape[1], generator=generator, device=generator.device).to(device)
    shuffle_draw = torch.rand(shape, generator=generator, device=generator.device).to(device)
    random_draw = torch.rand(shape, generator=generator, device=generator.device).to(device)
    replacement = torch.randint(vocab_size, shape, generator=generator, device=generator.device,
                                dtype=input_ids.dtype).to(device)

    moved = torch.where(special[:, order], input_ids, input_ids[:, order])
    to_shuffle = ~special & (shuffle_draw < shuffle_prob)
    to_random = ~special & ~to_shuffle & (random_draw < random_prob)
    corrupted = torch.where(to_shuffle, moved, input_ids)
    corrupted = torch.where(to_random, replacement, corrupted)
    labels = torch.full_like(input_ids, ORIGINAL)
    labels[to_shuffle] = SHUFFLED
    labels[to_random] = RANDOM
    labels[special] = IGNORE_INDEX
    return corrupted, labels
