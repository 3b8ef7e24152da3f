"""Span question answering on the BERT encoder (SQuAD v1.1 / v2.0, thesis §3.4, Table 3.1).

BERT's SQuAD head (Devlin et al., 2019): one linear map from each token's final hidden state to two
numbers, the logits of the answer starting and ending at that token. The loss is the mean of the
start and end cross-entropies over the sequence positions; an unanswerable question (v2.0), or a
window of a long context that does not hold the answer, is labelled with the [CLS] position 0.

The structure is Hugging Face's BertForQuestionAnswering (encoder without pooler, ``qa_outputs``),
so with MHA the parameter count equals ``transformers``' for the same sizes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import BertEncoder, init_bert_weights
from leanlm.modeling.models import register_model


@register_model("bert", "qa")
class BertForQuestionAnswering(nn.Module):
    """Encoder -> linear (d_model -> 2) per token: start and end logits of the answer span."""

    backbone_prefix = "encoder."
    # The pooler would be a fresh part of the backbone, but span heads read every token, not the
    # pooled [CLS], so this model has none (as in Hugging Face); listed for the fine-tuning protocol.
    fresh_prefixes = ("pooler.",)

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config, pooler=False)
        self.qa_outputs = nn.Linear(config.d_model, 2)
        init_bert_weights(self.qa_outputs, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``; logits are (B, L, 2): ``[..., 0]`` start, ``[..., 1]`` end.

        ``labels`` (B, 2) holds the start and end token positions of the answer (0 = [CLS]: no
        answer in this input); with them the loss is (CE(start) + CE(end)) / 2, else None.
        """
        sequence, _ = self.encoder(input_ids, attention_mask, token_type_ids)
        logits = self.qa_outputs(sequence)
        loss = None
        if labels is not None:
            labels = labels.long()
            if labels.ndim != 2 or labels.size(-1) != 2:
                raise ValueError(f"labels must be (batch, 2) start/end positions, got shape {tuple(labels.shape)}")
            length = logits.size(1)
            # Eager only: the check reads a tensor back to the host, a branch dynamo cannot trace (one
            # graph break per step of a compiled SQuAD run); compiled, cross-entropy's own bounds check
            # still refuses such a position (on CUDA as a device-side assert, without this message).
            if not torch.compiler.is_compiling() and bool(((labels < 0) | (labels >= length)).any()):
                raise ValueError(f"labels hold positions outside 0..{length - 1} (the input length)")
            # (B, L, 2) is (batch, classes = positions, 2): start and end cross-entropies at once,
            # averaged over both and the batch.
            loss = F.cross_entropy(logits.float(), labels)
        return {"loss": loss, "logits": logits}
