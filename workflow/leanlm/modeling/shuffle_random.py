"""The Shuffle+Random pretraining model (ch. 2): the BERT encoder and a 3-way token classifier.

Each token is classified as original (0), shuffled (1) or random (2); the corruption is the data
side's :func:`leanlm.training.shuffle_random.shuffle_random`. The model works with any word embedding,
hash embeddings included (their ``features`` pass through). Two heads (``pretrain.shuffle_random.head``):

- ``bert`` (the default): BERT's token-level prediction head (dense + GELU + LayerNorm) with 3 outputs
  instead of the vocabulary, so S+R and MLM differ only in what the last layer predicts;
- ``official_code``: the official HashFormers code's (``RobertaForShuffleRandomThreeWayClassification``,
  from Yamaguchi et al.'s S+R code): dropout (the hidden dropout) + Linear(d, 3), d^2 + 3d fewer
  parameters (592,128 at BERT-base). The thesis describes neither; docs/design-notes.md says which the
  profiles use and why.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import BertEncoder, init_bert_weights
from leanlm.modeling.heads import IGNORE_INDEX, MLMTransform
from leanlm.modeling.models import register_model

LABELS = ("original", "shuffled", "random")  # leanlm.training.shuffle_random's ORIGINAL, SHUFFLED, RANDOM
N_CLASSES = len(LABELS)
SHUFFLE_RANDOM_HEADS = ("bert", "official_code")


@register_model("bert", "shuffle_random")
class BertForShuffleRandom(nn.Module):
    """Encoder (no pooler: S+R never trains it) + transform + linear(d, 3) on every token; with
    ``head_type="official_code"`` the transform is the official code's dropout."""

    def __init__(self, config: ModelConfig, head_type: str = "bert"):
        super().__init__()
        if head_type not in SHUFFLE_RANDOM_HEADS:
            raise ConfigError(f"pretrain.shuffle_random.head={head_type!r} must be one of {SHUFFLE_RANDOM_HEADS} "
                              f"(bert: dense + GELU + LayerNorm + linear, the default; official_code: dropout + "
                              f"linear, as the official HashFormers code)")
        self.config, self.head_type = config, head_type
        self.encoder = BertEncoder(config, pooler=False)
        # What the classifier reads the encoder's output through (the default's construction order is kept:
        # the same seed gives the same weights as before the option existed).
        self.transform = MLMTransform(config) if head_type == "bert" else nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, N_CLASSES)
        init_bert_weights(self.transform, config.initializer_range)
        init_bert_weights(self.classifier, config.initializer_range)

    @staticmethod
    def options_from_weights(weights) -> dict[str, str]:
        """The head a checkpoint's weights (names) were saved from: the checkpoint does not record it, and only
        the default head has a transform with weights (leanlm.modeling.checkpoint.load_model)."""
        return {"head_type": "bert" if "transform.dense.weight" in weights else "official_code"}

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
