"""BERT's word embedding, the EMBEDDINGS registry's ``standard`` variant (ModelConfig's default).

``standard``: an nn.Embedding(vocab_size, d) lookup, parameter for parameter BERT's; no options and no batch
feature. Its own file, so that editing ch. 2's hash embeddings reruns none of the runs that build it.
"""

from __future__ import annotations

import torch
from torch import nn

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embedding_base import EmbeddingVariant
from leanlm.modeling.embedding_options import read_options
from leanlm.modeling.variants import EMBEDDINGS
from leanlm.modeling.vocab import padding_parameters, vocab_table


@EMBEDDINGS.register("standard")
class StandardEmbedding(EmbeddingVariant, nn.Embedding):
    """BERT's word embedding: one row per vocabulary entry, padded to ``config.vocab_rows`` for the
    tensor cores (an nn.Embedding, so checkpoints and weight tying see the table they always saw; the
    Hugging Face export writes the real rows only)."""

    features: tuple[str, ...] = ()

    def __init__(self, config: ModelConfig):
        read_options(config, self.defaults)
        # config.vocab_rows: padded for the tensor cores, as the MLM head tied to it (leanlm.modeling.vocab)
        super().__init__(config.vocab_rows, config.d_model, padding_idx=config.pad_token_id)
        vocab_table(self, config.vocab_size)

    def forward(self, input_ids: torch.Tensor, **features: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids)

    def embedding_parameter_count(self) -> int:
        return self.weight.numel() - padding_parameters(self)  # Eq. 2.9: |V| x d, padded rows left out
