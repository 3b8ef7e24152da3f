"""The shared skeleton of Lee-Thorp et al.'s (2022) token-mixing baselines (FNet, Linear; §3.4.1 fn. 5).

FNet "replaces the self-attention sublayer" of each block by a fixed or learned mixing of the
tokens along the sequence and the hidden dimension: no queries, keys, values or attention maps.
These mixers keep the :class:`Attention` signature (``forward(x, attention_mask, kv)``) so the
encoder builds them by name like any attention variant, with two differences that builders must
respect:

- They mix a sequence of fixed maximum length ``max_len`` (the paper's inputs are always padded to
  512 tokens): built from a model config (:func:`~leanlm.modeling.attention.base.attention_sublayer`) it is
  the model's longest input, ``config.max_tokens``; :func:`build_attention` passes ``max_len`` to every
  class whose ``needs_max_len`` is true; it defaults to :data:`DEFAULT_MAX_LEN`, BERT-base's 512 (§3.4.3).
- They have no cross form (the output would not depend on the queries at all) and FNet has no
  causal form: ``supports_cross`` / ``supports_causal`` say so, and asking for them raises
  ConfigError (causal at construction, cross when ``kv`` is passed).

Padding is honoured by zeroing padded positions before mixing, so what sits there has no effect on
real tokens. There are no attention probabilities, so ``dropout`` is accepted and unused.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import torch

from leanlm.errors import ConfigError
from leanlm.modeling.attention.base import Attention

DEFAULT_MAX_LEN = 512


class TokenMixing(Attention):
    """Base of the parameter-light token mixers; a subclass defines :meth:`mix`."""

    needs_max_len: ClassVar[bool] = True
    supports_causal: ClassVar[bool] = False
    supports_cross: ClassVar[bool] = False

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True, max_len: int | None = DEFAULT_MAX_LEN):
        name = self.mixer_name
        if causal and not self.supports_causal:
            raise ConfigError(
                f"attention {name!r} has no causal form (every output mixes the whole sequence), so "
                f"it cannot be used in a decoder; use it in encoder-only models, or pick a causal "
                f"variant such as 'mha' or 'linear'"
            )
        super().__init__(d_model, n_heads, head_dim, dropout, causal, bias)
        if max_len is not None and (isinstance(max_len, bool) or int(max_len) != max_len or max_len < 1):
            raise ConfigError(f"attention {name!r}: max_len={max_len!r} must be a positive integer "
                              f"(the model's max_position)")
        self.max_len = None if max_len is None else int(max_len)

    @classmethod
    def config_kwargs(cls, config) -> dict:
        # the model's longest input: max_position less the position offset (RoBERTa's 2; 0 for the decoders)
        return {**super().config_kwargs(config), "max_len": config.max_tokens}

    @property
    def mixer_name(self) -> str:
        return self.variant_name or type(self).__name__

    @abc.abstractmethod
    def mix(self, x: torch.Tensor) -> torch.Tensor:
        """Mix ``x`` (B, L, d_m), padded positions already zero, into (B, L, d_m)."""

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                kv: torch.Tensor | None = None) -> torch.Tensor:
        if kv is not None and kv is not x:
            raise ConfigError(
                f"attention {self.mixer_name!r} is a token mixer with no cross-attention form (its "
                f"output could not depend on the queries); use a softmax variant for cross-attention"
            )
        length = x.size(1)
        if self.max_len is not None and length > self.max_len:
            raise ValueError(f"{type(self).__name__}: sequence of {length} tokens is longer than "
                             f"max_len={self.max_len}; build it with max_len=config.max_position")
        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.shape != x.shape[:2]:
                raise ValueError(
                    f"attention_mask must be (batch, {length}) with 1 for tokens and 0 for padding, "
                    f"got shape {tuple(attention_mask.shape)}"
                )
            x = x * attention_mask[..., None].to(x.dtype)
        return self.mix(x)

    @property
    def score_heads(self) -> int:
        return 0  # no attention maps at all

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_len={self.max_len}"
