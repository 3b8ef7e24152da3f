"""Task heads on the BERT encoder: masked language modelling and sequence classification/regression.

Both keep BERT's (and Hugging Face's) structure, so with MHA their parameter counts equal
``transformers``' BertForMaskedLM / BertForSequenceClassification for the same sizes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import TrainingError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import BertEncoder, init_bert_weights
from leanlm.modeling.lm_loss import IGNORE_INDEX, vocab_cross_entropy
from leanlm.modeling.models import register_model
from leanlm.modeling.vocab import real_logits, vocab_table


class MLMTransform(nn.Module):
    """dense -> GELU -> LayerNorm before the vocabulary projection (BERT's prediction head)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(hidden)))


@register_model("bert", "mlm")
class BertForMLM(nn.Module):
    """Encoder + MLM head whose decoder shares its weight with the word embeddings (plus a bias)."""

    takes_return_logits = True  # forward(return_logits=False): the loss alone (the engine's training step)

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config, pooler=False)
        self.transform = MLMTransform(config)
        # config.vocab_rows: the vocabulary padded for the tensor cores (leanlm.modeling.vocab)
        self.decoder = vocab_table(nn.Linear(config.d_model, config.vocab_rows, bias=True), config.vocab_size)
        init_bert_weights(self.transform, config.initializer_range)
        init_bert_weights(self.decoder, config.initializer_range)
        # Tied after init so the shared matrix keeps the embedding's initialisation. Only BERT's own
        # table can be tied: a hash or projected embedding has no (vocab x d) matrix to share.
        words = self.encoder.embeddings.word_embeddings
        if isinstance(words, nn.Embedding) and words.weight.shape == self.decoder.weight.shape:
            self.decoder.weight = words.weight

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, masked_positions: torch.Tensor | None = None,
                return_logits: bool = True, **features: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``.

        Without labels, logits are (B, L, V) and loss is None. With labels (B, L; -100 = ignored),
        the vocabulary projection runs only at the labelled positions (about 15% of tokens, and the
        largest matmul of the model), so logits are (N_labelled, V) in row-major order of those
        positions. A batch with no labelled position gets a zero loss that still has a graph.

        ``masked_positions``: the labelled positions as flat indices into (B * L), row-major, which
        the batch builder computes on the CPU (:func:`labelled_positions`). Selecting rows with a boolean
        mask on the device has a data-dependent shape, so the host would wait for the device to count
        them every step; with the indices given, their number is known on the host. Same rows, same order,
        same loss.

        ``return_logits=False`` (the training step): the loss alone, computed in chunks of rows so the
        labelled positions' logits never exist whole (leanlm.modeling.lm_loss); logits is None.
        """
        sequence, _ = self.encoder(input_ids, attention_mask, token_type_ids, **features)
        if labels is None:
            return {"loss": None, "logits": real_logits(self.decoder(self.transform(sequence)), self.config.vocab_size)}
        if masked_positions is None:
            selected = labels != IGNORE_INDEX
            hidden, targets = sequence[selected], labels[selected]
        else:
            hidden = sequence.reshape(-1, sequence.size(-1)).index_select(0, masked_positions)
            targets = labels.reshape(-1).index_select(0, masked_positions)
        # No labelled position: the loss is 0 with a graph (lm_loss divides by at least one target).
        loss, logits = vocab_cross_entropy(self.transform(hidden), self.decoder.weight, self.decoder.bias,
                                           targets, self.config.vocab_size, return_logits=return_logits)
        return {"loss": loss, "logits": logits}


def labelled_positions(labels: torch.Tensor) -> torch.Tensor:
    """Flat row-major indices of the positions ``labels`` scores (not -100): BertForMLM's
    ``masked_positions``, taken on the CPU when the batch is built."""
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)


@register_model("bert", "classification")
class BertForSequenceClassification(nn.Module):
    """Encoder (with pooler) -> dropout -> linear classifier on the pooled [CLS] representation.

    ``num_labels == 1`` is regression (MSE on a float target, e.g. STS-B); otherwise
    cross-entropy over ``num_labels`` classes. RoBERTa's head (dense + tanh + out_proj, no pooler)
    has the same parameter count as this pooler + classifier.
    """

    backbone_prefix = "encoder."
    fresh_prefixes = ("pooler.",)

    def __init__(self, config: ModelConfig, num_labels: int):
        super().__init__()
        if int(num_labels) != num_labels or num_labels < 1:
            raise ValueError(f"num_labels={num_labels!r} must be a positive integer (1 = regression)")
        self.config = config
        self.num_labels = int(num_labels)
        self.encoder = BertEncoder(config, pooler=True)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, self.num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **features: torch.Tensor
                ) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``; logits are (B, num_labels), loss None without labels.

        ``features`` (hash embeddings' ``hash_bits`` etc.) go to the word embedding.
        """
        _, pooled = self.encoder(input_ids, attention_mask, token_type_ids, **features)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.long())
        return {"loss": loss, "logits": logits}
