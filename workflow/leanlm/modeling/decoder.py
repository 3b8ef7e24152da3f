"""The GPT-2-style decoder of ch. 3 (§3.4.3: GPT2-base, 12 layers, d_m 768, 12 heads, 512 tokens).

Each block is pre-LN, as GPT-2 is::

    x = x + Dropout(Attention(LN(x)))            # causal self-attention from the ATTENTION registry
    x = x + Dropout(W2 GELU_tanh(W1 LN(x)))      # MLP of width d_ff

after learned token + position embeddings (and dropout), with a final LayerNorm on top. The attention
sublayer is chosen by ``config.attention`` (SHA, MHA, EL-ATT, MQA, SKV, MHE-ADD, MHE-MUL, ...), so
the seven decoders of Table 3.2 differ only there. With MHA every tensor has its counterpart in
``transformers``' GPT-2 (our Q, K, V projections are the three thirds of its fused ``c_attn``), so
parameter counts equal GPT2LMHeadModel / GPT2ForSequenceClassification for the same sizes.

Two heads (the thesis pretrains with causal LM, DESIGN §8, and fine-tunes on GLUE):

- :class:`GPT2ForCausalLM` (``causal_lm``): next-token LM whose output matrix is the token
  embedding (tied, as GPT-2; ``tie_word_embeddings: false`` gives a separate ``lm_head``);
- :class:`GPT2ForSequenceClassification` (``classification``): a bias-free linear score on the
  hidden state of the last real token (GPT-2 has no [CLS]; the last token has read the whole text).

GPT-2 has no token-type embedding: ``type_vocab_size`` is ignored and ``token_type_ids`` too. Only
the standard token embedding is built here (``config.embedding`` must be ``"standard"``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.attention import attention_sublayer
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.encoder import init_bert_weights
from leanlm.modeling.lm_loss import shift_left, vocab_cross_entropy
from leanlm.modeling.models import register_model
from leanlm.modeling.padding import padding_mask
from leanlm.modeling.recompute import BlockStack
from leanlm.modeling.vocab import real_logits, vocab_table



class GPT2Block(nn.Module):
    """One pre-LN decoder block (GPT-2's ``ln_1 -> attn -> + -> ln_2 -> mlp -> +``)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.attention = attention_sublayer(config, causal=True)
        self.mlp_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.d_model, config.d_ff)
        self.output = nn.Linear(config.d_ff, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), attention_mask))
        # GPT-2's GELU is the tanh approximation ("gelu_new"), unlike BERT's exact erf form.
        hidden = F.gelu(self.intermediate(self.mlp_norm(x)), approximate="tanh")
        return x + self.dropout(self.output(hidden))


class GPT2Decoder(BlockStack, nn.Module):
    """Token + learned position embeddings, ``n_layers`` pre-LN blocks (each checkpointed when
    ``activation_checkpointing``, leanlm.modeling.recompute), final LayerNorm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.embedding != "standard":
            raise ConfigError(f"model config: embedding={config.embedding!r}: the GPT-2 decoder builds only "
                              f"the standard token embedding (ch. 3); use embedding: standard")
        self.config = config
        self.position_offset = config.position_offset
        # config.vocab_rows: padded for the tensor cores, as the output head tied to it (leanlm.modeling.vocab)
        self.token_embeddings = vocab_table(nn.Embedding(config.vocab_rows, config.d_model), config.vocab_size)
        self.position_embeddings = nn.Embedding(config.max_position, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(GPT2Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        init_gpt2_weights(self, config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states (B, L, d_m) after the final LayerNorm; ``attention_mask`` is 1 = token, 0 = pad."""
        length = input_ids.size(1)
        limit = self.position_embeddings.num_embeddings - self.position_offset
        if length > limit:
            raise ValueError(f"input of {length} tokens is longer than the decoder's {limit} positions "
                             f"(max_position={self.position_embeddings.num_embeddings}); evaluate long "
                             f"texts in windows (leanlm.evaluation.perplexity.strided_perplexity)")
        attention_mask = padding_mask(attention_mask)  # None without padding: SDPA's is_causal path
        positions = torch.arange(self.position_offset, self.position_offset + length, device=input_ids.device)
        x = self.dropout(self.token_embeddings(input_ids) + self.position_embeddings(positions)[None])
        for layer in self.layers:
            x = self.run_block(layer, x, attention_mask)
        return self.final_norm(x)


@torch.no_grad()
def init_gpt2_weights(module: nn.Module, config: ModelConfig) -> None:
    """GPT-2's initialisation: N(0, 0.02)-style weights (``initializer_range``), zero biases, unit
    LayerNorms, and the projections that write into the residual stream (attention W^O, MLP output)
    scaled by 1/sqrt(2 n_layers), so the residual sum does not grow with depth (Radford et al., 2019)."""
    init_bert_weights(module, config.initializer_range)
    residual_std = config.initializer_range / math.sqrt(2 * config.n_layers)
    for block in module.modules():
        if isinstance(block, GPT2Block):
            block.output.weight.normal_(0.0, residual_std)
            projection = getattr(block.attention, "output", None)
            if isinstance(projection, nn.Linear):
                projection.weight.normal_(0.0, residual_std)


@register_model("gpt2", "causal_lm")
class GPT2ForCausalLM(nn.Module):
    """Decoder + next-token head; the pretrained model of Table 3.2's decoder-only rows.

    ``labels`` are the input ids themselves (-100 where nothing is to be predicted): the model shifts
    them, so position t is scored on token t+1.
    """

    backbone_prefix = "decoder."
    takes_return_logits = True  # forward(return_logits=False): the loss alone (the engine's training step)

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.decoder = GPT2Decoder(config)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = vocab_table(nn.Linear(config.d_model, config.vocab_rows, bias=False), config.vocab_size)
            init_bert_weights(self.lm_head, config.initializer_range)

    def output_embeddings(self) -> torch.Tensor:
        """The (vocab_rows, d_m) output matrix: the token embedding when tied (GPT-2), else ``lm_head``
        (rows beyond ``vocab_size`` are padding: leanlm.modeling.vocab)."""
        return self.decoder.token_embeddings.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, return_logits: bool = True,
                **ignored) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``: logits (B, L, V); loss is the mean next-token
        cross-entropy over labelled positions (None without labels; 0 with a graph when nothing is to
        be predicted, e.g. one-token rows). ``return_logits=False`` (the training step): the loss
        alone, computed in chunks of rows so the logits never exist whole (leanlm.modeling.lm_loss);
        logits is None. ``**ignored`` takes batch keys other heads use (e.g. ``token_type_ids``)."""
        hidden = self.decoder(input_ids, attention_mask)
        if labels is None:
            return {"loss": None, "logits": real_logits(F.linear(hidden, self.output_embeddings()),
                                                        self.config.vocab_size)}
        loss, logits = vocab_cross_entropy(hidden, self.output_embeddings(), None, shift_left(labels),
                                           self.config.vocab_size, return_logits=return_logits)
        return {"loss": loss, "logits": logits}


def last_token_index(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, pad_token_id: int) -> torch.Tensor:
    """Index of the last real token of each row: the rightmost position with mask 1 (or, without a
    mask, the rightmost non-pad id, as ``transformers`` does). Works for right and left padding."""
    real = attention_mask.bool() if attention_mask is not None else input_ids != pad_token_id
    positions = torch.arange(input_ids.size(1), device=input_ids.device)
    # A row with no real token pools position 0 rather than failing.
    return (positions * real).argmax(dim=-1)


@register_model("gpt2", "classification")
class GPT2ForSequenceClassification(nn.Module):
    """Decoder -> hidden state of the last real token -> bias-free linear ``score`` (as HF GPT-2).

    ``num_labels == 1`` is regression (MSE, e.g. STS-B); otherwise cross-entropy. The whole decoder
    comes from the causal-LM checkpoint (``backbone_prefix``); only ``score`` starts fresh.
    """

    backbone_prefix = "decoder."
    fresh_prefixes: tuple[str, ...] = ()

    def __init__(self, config: ModelConfig, num_labels: int):
        super().__init__()
        if int(num_labels) != num_labels or num_labels < 1:
            raise ValueError(f"num_labels={num_labels!r} must be a positive integer (1 = regression)")
        self.config = config
        self.num_labels = int(num_labels)
        self.decoder = GPT2Decoder(config)
        self.score = nn.Linear(config.d_model, self.num_labels, bias=False)
        init_bert_weights(self.score, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``; logits are (B, num_labels). ``token_type_ids`` is accepted
        (the GLUE batches carry it) and ignored: GPT-2 has no segments."""
        hidden = self.decoder(input_ids, attention_mask)
        last = last_token_index(input_ids, attention_mask, self.config.pad_token_id)
        pooled = hidden[torch.arange(hidden.size(0), device=hidden.device), last]
        logits = self.score(pooled)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.long())
        return {"loss": loss, "logits": logits}
