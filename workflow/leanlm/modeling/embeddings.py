"""BERT's input embeddings: word + learned absolute position + token type, then LayerNorm, dropout.

The word embedding comes from the registry by ``config.embedding`` (leanlm.modeling.hash_embeddings):
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
from leanlm.modeling.hash_embeddings import build_word_embedding
# ProFormer, BERT-Hash and EELBERT build on HashEmbedding; their module registers them in EMBEDDINGS.
from leanlm.modeling import projection_embeddings  # noqa: F401


class BertEmbeddings(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.position_offset = config.position_offset
        self.word_embeddings = build_word_embedding(config)
        self.position_embeddings = nn.Embedding(config.max_position, config.d_model)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                **features: torch.Tensor) -> torch.Tensor:
        length = input_ids.size(1)
        limit = self.position_embeddings.num_embeddings - self.position_offset
        if length > limit:
            raise ValueError(
                f"input of {length} tokens is longer than the model's {limit} positions "
                f"(max_position={self.position_embeddings.num_embeddings}, "
                f"position_offset={self.position_offset}); truncate inputs to {limit} tokens"
            )
        positions = torch.arange(self.position_offset, self.position_offset + length,
                                 device=input_ids.device)
        embedded = self.word_embeddings(input_ids, **features) + self.position_embeddings(positions)[None]
        if token_type_ids is None:
            # Segment 0 for every token: one row broadcast instead of a lookup of zeros.
            embedded = embedded + self.token_type_embeddings.weight[0]
        else:
            embedded = embedded + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(embedded))
