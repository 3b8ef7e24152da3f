"""The Shuffle+Random pretraining model (ch. 2): the BERT encoder and a 3-way token classifier.

Each token is classified as original (0), shuffled (1) or random (2); the corruption is the data
side's :func:`leanlm.training.shuffle_random.shuffle_random`. The head mirrors BERT's token-level
prediction head (dense + GELU + LayerNorm) with 3 outputs instead of the vocabulary, so it works
with any word embedding, hash embeddings included (their ``features`` pass through).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import BertEncoder, init_bert_weights
from leanlm.modeling.heads import IGNORE_INDEX, MLMTransform
from leanlm.modeling.models import register_model

N_CLASSES = 3  # original, shuffled, random


@register_model("bert", "shuffle_random")
class BertForShuffleRandom(nn.Module):
    """Encoder (no pooler: S+R never trains it) + transform + linear(d, 3) on every token."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config, pooler=False)
        self.transform = MLMTransform(config)
        self.classifier = nn.Linear(config.d_model, N_CLASSES)
        init_bert_weights(self.transform, config.initializer_range)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                **features: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``: logits (B, L, 3); with labels (-100 = ignored) the mean
        cross-entropy over labelled tokens (a zero loss with a graph if none is labelled)."""
        sequence, _ = self.encoder(input_ids, attention_mask, token_type_ids, **features)
        logits = self.classifier(self.transform(sequence))
        if labels is None:
            return {"loss": None, "logits": logits}
        # The mean over labelled tokens by ignore_index, not by selecting them (a boolean selection has a
        # data-dependent shape: the host would wait for the device every step); none labelled: 0, not NaN.
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                               ignore_index=IGNORE_INDEX)
        loss = torch.where((labels != IGNORE_INDEX).any(), loss, torch.zeros_like(loss))
        return {"loss": loss, "logits": logits}
