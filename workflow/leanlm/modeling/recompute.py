"""Activation checkpointing per block: a training option that trades compute for memory.

Training keeps, for the backward, the tensors each operation saved in the forward: per transformer block
a dozen tensors of the batch's size and, for attention, the query/key/value heads and more. With
checkpointing on, each block of a backbone (:class:`BlockStack`) runs inside ``torch.utils.checkpoint``
(``use_reentrant=False``): only the block's inputs are kept, and the backward runs the block's forward
again to rebuild what it needs, about a third more compute for a fraction of the activation memory
(``leanlm budget`` prints both; docs/memory.md).

The recomputation is the same computation: the random state is restored for it (dropout draws the
same masks) and autocast's state is replayed, so losses and gradients are those of the plain forward up
to float rounding (tests/test_recompute.py). It applies while training with gradients only; evaluation
and inference run the blocks as they are.

Switched on with :func:`set_activation_checkpointing`, which the training engine calls when
``TrainConfig.activation_checkpointing`` (a profile's ``pretrain.<objective>.activation_checkpointing``)
is true.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from leanlm.errors import ConfigError


class BlockStack:
    """Mixin of the modules that run a stack of transformer blocks (the backbones): they call each block
    through :meth:`run_block`, which checkpoints it when ``activation_checkpointing`` is set."""

    activation_checkpointing: bool = False

    def run_block(self, block: nn.Module, *args):
        if self.activation_checkpointing and block.training and torch.is_grad_enabled():
            return checkpoint(block, *args, use_reentrant=False)
        return block(*args)


def set_activation_checkpointing(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Switch activation checkpointing of every block stack in ``model`` on or off; returns the model.

    ConfigError if ``model`` has no block stack (a model that is not one of leanlm's backbones)."""
    stacks = [m for m in model.modules() if isinstance(m, BlockStack)]
    if not stacks:
        raise ConfigError(f"activation_checkpointing: {type(model).__name__} has no stack of transformer "
                          f"blocks to checkpoint (leanlm.modeling.recompute.BlockStack); set "
                          f"activation_checkpointing: false for it")
    for stack in stacks:
        stack.activation_checkpointing = bool(enabled)
    return model
