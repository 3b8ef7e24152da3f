"""The BERT-style encoder (post-LN), parameter for parameter BERT/RoBERTa-base with MHA.

Each layer: x = LN(x + Dropout(Attention(x))); x = LN(x + Dropout(W2 GELU(W1 x))). The attention
sublayer comes from the registry by ``config.attention``, so SHA/MHA/MHE encoders differ only there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.modeling.attention import Attention, attention_sublayer
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.embeddings import BertEmbeddings
from leanlm.modeling.padding import padding_mask
from leanlm.modeling.recompute import BlockStack


@torch.no_grad()
def init_bert_weights(module: nn.Module, std: float) -> None:
    """BERT's init for ``module`` and everything under it.

    Linear and embedding weights ~ N(0, std), biases 0 (the padding row too, as Hugging Face does),
    LayerNorm weight 1 and bias 0; attention variants initialise their own extra parameters.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            m.weight.normal_(0.0, std)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            m.weight.normal_(0.0, std)
            if m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.zero_()
        elif isinstance(m, Attention):
            m.init_extra_parameters(std)


class BertLayer(nn.Module):
    """One post-LN transformer block; ``attention`` is the registry module (counted per block)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attention = attention_sublayer(config, causal=False)
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.d_model, config.d_ff)
        self.output = nn.Linear(config.d_ff, config.d_model)
        self.output_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, attention_mask)))
        # BERT's GELU is the exact (erf) form, not the tanh approximation.
        ffn = self.output(F.gelu(self.intermediate(x)))
        return self.output_norm(x + self.dropout(ffn))


class BertPooler(nn.Module):
    """dense + tanh on the first ([CLS]) token: the sentence representation for classifiers."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(sequence_output[:, 0]))


class BertEncoder(BlockStack, nn.Module):
    """Embeddings, ``n_layers`` post-LN blocks (each checkpointed when ``activation_checkpointing``,
    leanlm.modeling.recompute) and (optionally) the pooler.

    ``pooler=False`` leaves the pooler out, as Hugging Face's BertForMaskedLM does: MLM pretraining
    never trains it, and parameters without gradients trip up DDP.
    """

    def __init__(self, config: ModelConfig, pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.n_layers))
        self.pooler = BertPooler(config) if pooler else None
        init_bert_weights(self, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, **features: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns ``(sequence_output (B, L, d_m), pooled_output (B, d_m) or None without pooler)``.

        ``features`` (e.g. ``hash_bits``) go to the word embedding: hash embeddings read them.
        """
        attention_mask = padding_mask(attention_mask)  # None without padding: SDPA's mask-free path
        x = self.embeddings(input_ids, token_type_ids, **features)
        for layer in self.layers:
            x = self.run_block(layer, x, attention_mask)
        pooled = self.pooler(x) if self.pooler is not None else None
        return x, pooled
