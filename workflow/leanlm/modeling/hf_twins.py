"""``transformers`` twins of leanlm's models: the same function in Hugging Face's code, with the same weights.

A twin is how a leanlm model is checked against an implementation it did not write: the BERT MLM model
against ``transformers.BertForMaskedLM`` and the standard Qwen decoder of ch. 4 against
``transformers.Qwen2ForCausalLM``, their weights through the same maps the export writes
(:mod:`leanlm.modeling.hf_layout`: BERT's names, Qwen2's, which a standard model has already). With dropout 0
both compute the same loss on the same batch up to float rounding; tests/test_hf_twins.py checks it on the
CPU in fp32, and the GPU check (leanlm.benchmarks.gpucheck) trains both side by side in bf16.

A twin's ``forward(**batch)`` takes leanlm's batches (``input_ids``, ``labels``; MLM batches also carry
``masked_positions``, which Hugging Face's loss does not need: it scores every labelled position) and
returns ``{"loss": ...}``, so the training engine trains it as it trains the leanlm model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig

# Parameters of the Hugging Face models that hold no weights of their own: tied to another tensor on
# construction (BERT's decoder shares the word embeddings and its bias is cls.predictions.bias).
_BERT_TIED = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}


class HFTwin(nn.Module):
    """A Hugging Face model behind leanlm's batch interface: ``forward(**batch) -> {"loss", "logits"}``."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf = hf_model

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, masked_positions: torch.Tensor | None = None,
                **_: Any) -> dict[str, torch.Tensor | None]:
        out = self.hf(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        return {"loss": out.loss, "logits": out.logits}


def _load(hf_model: nn.Module, tensors: dict[str, torch.Tensor], tied: set[str], what: str) -> None:
    """Load ``tensors`` into ``hf_model``; every parameter must come from them (tied ones excepted)."""
    missing, unexpected = hf_model.load_state_dict(tensors, strict=False)
    # Buffers Hugging Face fills itself (BERT's position_ids, rotary frequencies) are not weights.
    buffers = {name for name, _ in hf_model.named_buffers()}
    missing = sorted(set(missing) - tied - buffers)
    if missing or unexpected:
        raise ConfigError(f"{what}: the leanlm weights do not fill the transformers model (missing "
                          f"{missing}, unexpected {sorted(unexpected)}); the name map is out of date")
    if hasattr(hf_model, "tie_weights"):
        hf_model.tie_weights()


def bert_twin(model: nn.Module) -> HFTwin:
    """``transformers.BertForMaskedLM`` with ``model``'s weights (a leanlm BERT MLM model with MHA)."""
    from transformers import BertConfig, BertForMaskedLM

    from leanlm.modeling.checkpoint import model_kind
    from leanlm.modeling.hf_layout import hf_bert

    if model_kind(model) != "mlm":
        raise ConfigError(f"bert_twin: a BERT MLM model is needed, got a {model_kind(model)!r} model")
    fields, tensors = hf_bert(model, "bert_twin")
    hf_config = BertConfig(**{k: v for k, v in fields.items() if k not in ("model_type", "architectures")})
    hf = BertForMaskedLM(hf_config)
    _load(hf, tensors, _BERT_TIED, "bert_twin")
    return HFTwin(hf.to(next(model.parameters()).device))


def check_qwen2_twin(config: ModelConfig) -> None:
    """Raise ConfigError unless a leanlm Qwen decoder of ``config`` is a plain Qwen2: standard attention in
    every layer, no q/k norm (Qwen3's), head_dim x heads = d_model."""
    if config.backbone != "qwen":
        raise ConfigError(f"qwen2_twin: backbone={config.backbone!r}; only the qwen decoder has a Qwen2 twin")
    if config.attention not in ("standard", "mha"):  # "mha" is the config default, built as standard
        raise ConfigError(f"qwen2_twin: attention={config.attention!r}; only a standard model is a Qwen2 "
                          f"(the simple mixers are the thesis's, not Hugging Face's)")
    if config.qk_norm:
        raise ConfigError("qwen2_twin: qk_norm=True is Qwen3's q/k RMSNorm, which Qwen2 does not have")
    if config.n_heads * config.head_dim != config.d_model:
        raise ConfigError(f"qwen2_twin: n_heads*head_dim={config.n_heads * config.head_dim} != "
                          f"d_model={config.d_model}; Qwen2 derives its head size from them")


def qwen2_twin(model: nn.Module) -> HFTwin:
    """``transformers.Qwen2ForCausalLM`` with a standard leanlm Qwen decoder's weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from leanlm.modeling.hf_layout.qwen2 import qwen2_config_fields, qwen2_tensors

    config: ModelConfig = model.config
    if config.dropout:
        # Qwen2 has no residual dropout: with it the two would compute different functions in training.
        raise ConfigError(f"qwen2_twin: dropout={config.dropout}; Qwen2 has no residual dropout, set 0")
    check_qwen2_twin(config)
    hf = Qwen2ForCausalLM(Qwen2Config(**qwen2_config_fields(config)))
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    # Qwen2's tables have vocab_size rows: the padded ones (leanlm.modeling.vocab) stay behind.
    _load(hf, qwen2_tensors(model), tied, "qwen2_twin")
    return HFTwin(hf.to(next(model.parameters()).device))
