"""Multiple choice on the BERT encoder (COPA): score each (context, choice) pair, softmax over choices.

Each of the C choices of an example is encoded together with the context as one text pair
``[CLS] context [SEP] choice [SEP]``; the pooled [CLS] vector goes through dropout and a
``d_model -> 1`` linear layer, and the C scores of an example form its logits. One linear layer
shared by all choices means the head does not depend on C, so the same model serves any number of
choices (BERT's and Hugging Face's BertForMultipleChoice do the same).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import BertEncoder, init_bert_weights
from leanlm.modeling.models import register_model


@register_model("bert", "multiple_choice")
class BertForMultipleChoice(nn.Module):
    """Encoder (with pooler) -> dropout -> linear(1) per (context, choice) pair; logits (B, C)."""

    backbone_prefix = "encoder."
    fresh_prefixes = ("pooler.",)  # MLM pretraining trains no pooler

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config, pooler=True)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, 1)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
        """``input_ids`` (and the mask/type ids) are (B, C, L); ``labels`` (B,) index the right choice.

        Returns ``dict(loss, logits)`` with logits (B, C); loss is cross-entropy over the choices,
        None without labels.
        """
        batch, choices, length = input_ids.shape
        # All B*C pairs go through the encoder as one batch: no loop over choices.
        flat = lambda t: None if t is None else t.reshape(batch * choices, length)  # noqa: E731
        _, pooled = self.encoder(flat(input_ids), flat(attention_mask), flat(token_type_ids))
        logits = self.classifier(self.dropout(pooled)).view(batch, choices)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels.long())
        return {"loss": loss, "logits": logits}
