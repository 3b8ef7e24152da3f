"""The language models' loss over the vocabulary, without a second copy of the logits.

Every LM head (BERT's MLM, GPT-2's and Qwen's next-token heads, the encoder-decoder's translation head)
ends in ``cross_entropy(hidden @ W^T + b, targets)``, averaged over the positions that have a target
(label ``-100`` marks the others). At the thesis's sizes the logits are the largest tensor of the step:
a micro-batch of 16 x 2048 tokens (ch. 4's) over Pythia's 50,304 rows is 1.6G numbers, 3.3 GB in bf16
and 6.6 GB again as the float32 copy the loss is computed in. Two things keep that down:

- next-token targets are the labels shifted left with a final ignored column (:func:`shift_left`), so
  position t of the logits is scored on token t+1 in place: no ``logits[:, :-1]`` slice to copy;
- with ``return_logits=False`` (the training step, leanlm.training.engine) the rows are cut into chunks
  of about :data:`CHUNK_ELEMENTS` logits, and each chunk's projection and cross-entropy run inside
  ``torch.utils.checkpoint``: only one chunk's logits exist at a time, in the forward and again when the
  backward recomputes them. The last chunk is not recomputed: the backward begins with it, so keeping its
  log-softmax costs no more at the peak than recomputing it would. The loss and gradients are the unchunked ones up to float rounding.

The loss is the sum over chunks divided by the number of targets, so a batch with nothing to predict
(one-token rows, every label -100) has the loss 0 with a graph, not 0/0. Padded vocabulary rows
(leanlm.modeling.vocab) are cut off each chunk's logits before the loss sees them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from leanlm.modeling.vocab import real_logits

IGNORE_INDEX = -100  # label of positions that take no part in the loss

# Logits per chunk of the chunked loss: 2^25 (32M) numbers, 128 MB in float32, so a chunk's logits, their
# float32 copy and their gradient stay under half a GB whatever the vocabulary (Pythia's 50,304 rows:
# 640 rows a chunk; a 151,936-row Qwen vocabulary: 192 rows).
CHUNK_ELEMENTS = 1 << 25


def shift_left(labels: torch.Tensor) -> torch.Tensor:
    """Next-token targets (B, L) from labels (B, L): position t is scored on ``labels[:, t+1]``, the last
    position on nothing (-100)."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def chunk_rows(vocab_rows: int) -> int:
    """Rows per chunk for a vocabulary of ``vocab_rows``: about CHUNK_ELEMENTS logits, a multiple of 64
    rows when that many fit (full tiles for the matmul), at least one row."""
    rows = max(1, CHUNK_ELEMENTS // vocab_rows)
    return rows - rows % 64 if rows >= 64 else rows


def vocab_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                        targets: torch.Tensor, vocab_size: int, *, label_smoothing: float = 0.0,
                        return_logits: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(loss, logits)`` of the projection ``hidden @ weight^T + bias`` scored on ``targets``.

    ``hidden`` (..., d), ``targets`` (...) of the same leading shape, -100 where nothing is predicted;
    ``weight`` (vocab_rows, d) may have padded rows beyond ``vocab_size``. The loss is the mean
    (label-smoothed) cross-entropy over the targets, in float32. With ``return_logits`` the logits
    (..., vocab_size) are computed whole and returned (evaluation reads them); without, they are
    computed chunk by chunk and never returned (None).
    """
    flat_hidden = hidden.reshape(-1, hidden.size(-1))
    flat_targets = targets.reshape(-1)
    logits = None
    if return_logits:
        logits = real_logits(F.linear(hidden, weight, bias), vocab_size)
        total = _summed_loss(logits.reshape(-1, vocab_size), flat_targets, label_smoothing)
    else:
        rows = chunk_rows(weight.size(0))
        pieces = list(zip(flat_hidden.split(rows), flat_targets.split(rows)))
        # The last chunk is computed plainly: the backward starts with it while every activation of the
        # model is still alive, so recomputing it would save no peak memory and cost a projection (a
        # batch whose logits fit one chunk, as the CPU's and BERT's masked rows do, projects once).
        total = sum(_chunk(h, weight, bias, t, vocab_size, label_smoothing, last=i == len(pieces) - 1)
                    for i, (h, t) in enumerate(pieces))
    count = (flat_targets != IGNORE_INDEX).sum()
    return total / count.clamp_min(1), logits


def _chunk(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
           vocab_size: int, label_smoothing: float, last: bool = False) -> torch.Tensor:
    """One chunk's summed loss; recomputed in the backward, so its logits are not kept (but for the
    ``last`` chunk, whose log-softmax the backward uses at once)."""
    if last or not torch.is_grad_enabled():
        return _projected_loss(hidden, weight, bias, targets, vocab_size, label_smoothing)
    return checkpoint(_projected_loss, hidden, weight, bias, targets, vocab_size, label_smoothing,
                      use_reentrant=False)


def _projected_loss(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    targets: torch.Tensor, vocab_size: int, label_smoothing: float) -> torch.Tensor:
    return _summed_loss(real_logits(F.linear(hidden, weight, bias), vocab_size), targets, label_smoothing)


def _summed_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    # float32 whatever the autocast dtype: the softmax over ~50K entries needs its precision.
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX,
                           label_smoothing=label_smoothing, reduction="sum")
