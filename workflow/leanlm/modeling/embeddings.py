"""BERT's input embeddings: word + learned absolute position + token type, then LayerNorm, dropout.

``config.positions == "sinusoidal"`` replaces the learned position table by the fixed sinusoidal one
(a buffer, rebuilt rather than saved), and ``type_vocab_size == 0`` drops the token-type table (token
types are then ignored): ProFormer's embeddings, which Table 2.2 counts without either table.

The word embedding comes from the registry by ``config.embedding`` (:func:`build_word_embedding`;
leanlm.modeling.variants loads that variant's module alone, modeling/*_embeddings.py):
"standard" is BERT's nn.Embedding table under the same attribute name ``word_embeddings``, so its
checkpoints and Hugging Face export are unchanged; hash embeddings read batch ``features``
(``hash_bits``, ``hash_buckets``, ...) that ``forward`` passes through.

Position ids are ``arange(L) + position_offset``: BERT counts from 0, RoBERTa from padding_idx + 1.
(RoBERTa proper skips padding tokens when numbering; with right padding, as here, real tokens get
the same ids and padded positions are masked out of attention anyway.)
"""

from __future__ import annotations

import torch
from torch import nn

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.seq2seq import sinusoidal_positions
# The registry loads the module of config.embedding alone (modeling/*_embeddings.py), so no job imports
# another variant's file.
from leanlm.modeling.variants import EMBEDDINGS


def build_word_embedding(config: ModelConfig) -> nn.Module:
    """The word embedding ``config.embedding`` names (ConfigError listing the known ones if unknown)."""
    return EMBEDDINGS.get(config.embedding)(config)


class BertEmbeddings(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.position_offset = config.position_offset
        self.word_embeddings = build_word_embedding(config)
        self.max_position = config.max_position
        if config.positions == "learned":
            self.position_embeddings = nn.Embedding(config.max_position, config.d_model)
        else:
            self.register_buffer("positions", sinusoidal_positions(config.max_position, config.d_model),
                                 persistent=False)
        self.token_type_embeddings = (nn.Embedding(config.type_vocab_size, config.d_model)
                                      if config.type_vocab_size else None)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                **features: torch.Tensor) -> torch.Tensor:
        length = input_ids.size(1)
        limit = self.max_position - self.position_offset
        if length > limit:
            raise ValueError(
                f"input of {length} tokens is longer than the model's {limit} positions "
                f"(max_position={self.max_position}, "
                f"position_offset={self.position_offset}); truncate inputs to {limit} tokens"
            )
        positions = torch.arange(self.position_offset, self.position_offset + length,
                                 device=input_ids.device)
        position_vectors = (self.position_embeddings(positions) if hasattr(self, "position_embeddings")
                            else self.positions[positions])
        embedded = self.word_embeddings(input_ids, **features) + position_vectors[None]
        if self.token_type_embeddings is not None and token_type_ids is None:
            # Segment 0 for every token: one row broadcast instead of a lookup of zeros.
            embedded = embedded + self.token_type_embeddings.weight[0]
        elif self.token_type_embeddings is not None:
            embedded = embedded + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(embedded))
