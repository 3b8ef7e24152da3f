"""Data-side pieces of the pretraining objectives: BERT's MLM corruption and sequence packing.

Both are plain tensor functions run when a batch is built (``batch_at(step, micro)``), not inside the
model. Masking draws only from the ``torch.Generator`` it is given; build it with
``leanlm.training.seeding.step_generator(seed, step, micro)`` so the masks of a micro-batch depend on
its place in training alone and a resumed run masks exactly like an uninterrupted one.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch

from leanlm.errors import ConfigError, DataError

IGNORE_INDEX = -100  # label value torch's cross_entropy skips (its default ignore_index)


def special_tokens_mask(input_ids: torch.Tensor, special_ids: Sequence[int]) -> torch.Tensor:
    """Boolean mask, True where ``input_ids`` holds one of ``special_ids`` ([CLS], [SEP], [PAD], ...)."""
    ids = torch.as_tensor(list(special_ids), dtype=input_ids.dtype, device=input_ids.device)
    return torch.isin(input_ids, ids)


def mlm_mask(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    mask_prob: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption: return ``(inputs, labels)``.

    Each position that is not special (``special_mask`` False; mark padding there too) is chosen with
    probability ``mask_prob``. A chosen token becomes [MASK] with probability 0.8, a token drawn
    uniformly from the whole vocabulary with probability 0.1 (as BERT does), and stays itself with
    probability 0.1. ``labels`` holds the original id at chosen positions and -100 elsewhere, so the
    loss covers exactly the chosen positions. If the draw chooses nothing in the whole batch (possible
    with tiny batches), the eligible position with the smallest draw is chosen, because a batch with
    no label gives a NaN mean loss.
    """
    if input_ids.shape != special_mask.shape:
        raise DataError(
            f"mlm_mask: input_ids {tuple(input_ids.shape)} and special_mask "
            f"{tuple(special_mask.shape)} must have the same shape"
        )
    if not 0.0 < mask_prob < 1.0:
        raise ConfigError(f"mask_prob={mask_prob} must lie strictly between 0 and 1 (BERT uses 0.15)")
    gen_device = generator.device
    shape = input_ids.shape
    # Draw on the generator's device, then move: the same generator gives the same masks on any device.
    select_draw = torch.rand(shape, generator=generator, device=gen_device).to(input_ids.device)
    kind_draw = torch.rand(shape, generator=generator, device=gen_device).to(input_ids.device)
    random_ids = torch.randint(
        vocab_size, shape, generator=generator, device=gen_device, dtype=input_ids.dtype
    ).to(input_ids.device)

    eligible = ~special_mask.bool()
    chosen = (select_draw < mask_prob) & eligible
    if not bool(chosen.any()) and bool(eligible.any()):
        flat = torch.where(eligible, select_draw, torch.full_like(select_draw, 2.0)).flatten()
        chosen = chosen.flatten().clone()
        chosen[flat.argmin()] = True
        chosen = chosen.view(shape)

    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    to_mask = chosen & (kind_draw < 0.8)
    to_random = chosen & (kind_draw >= 0.8) & (kind_draw < 0.9)
    inputs = torch.where(to_mask, torch.full_like(input_ids, mask_token_id), input_ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


def pack_sequences(
    token_id_lists: Iterable[Sequence[int]], seq_len: int, cls_id: int, sep_id: int
) -> torch.Tensor:
    """Pack tokenised documents into full rows ``[CLS] t_1 ... t_{seq_len-2} [SEP]``: no padding.

    Documents are concatenated in order with one [SEP] between consecutive documents (the document
    boundary the model can see) and the stream is cut into chunks of ``seq_len - 2`` tokens, each
    wrapped in [CLS] ... [SEP]. A document longer than a row continues in the next row; the tail of the
    stream that cannot fill a whole row is dropped (at most ``seq_len - 3`` tokens), and an input too
    short for one row gives a ``(0, seq_len)`` tensor. Empty documents are skipped. Returns a
    LongTensor of shape ``(N, seq_len)``.
    """
    if seq_len < 3:
        raise ConfigError(f"seq_len={seq_len} is too short to pack: a row needs [CLS], a token and [SEP]")
    docs = [np.asarray(doc, dtype=np.int64).ravel() for doc in token_id_lists]
    docs = [doc for doc in docs if doc.size]
    body_len = seq_len - 2
    if not docs:
        return torch.empty((0, seq_len), dtype=torch.long)
    separator = np.array([sep_id], dtype=np.int64)
    pieces = [docs[0]]
    for doc in docs[1:]:
        pieces += [separator, doc]
    stream = np.concatenate(pieces)
    n_rows = stream.size // body_len
    rows = np.empty((n_rows, seq_len), dtype=np.int64)
    rows[:, 0] = cls_id
    rows[:, 1:-1] = stream[: n_rows * body_len].reshape(n_rows, body_len)
    rows[:, -1] = sep_id
    return torch.from_numpy(rows)
