"""The skeleton every softmax attention variant shares, and the registry that names them.

An attention sublayer here is: project the input to queries, keys and values -> split them into
heads -> ``F.scaled_dot_product_attention`` -> merge the heads -> output projection (d_m x d_m when
``n_heads * head_dim == d_model``). Variants differ only in how they project (MHA: one matrix per
head; SHA: one shared head; MHE: one shared head modified by per-head embeddings; MQA: shared K/V;
...), so a variant is a constructor that builds its projections, plus, where needed, an override of
:meth:`Attention.project` or :meth:`Attention.merge_heads`, plus its Table 3.4 row
(:meth:`qkv_parameter_formula` and the LaTeX strings). Token mixers that are not softmax attention
(FNet, Linear) override :meth:`Attention.forward` and keep the same signature.

The registry contract (:class:`leanlm.modeling.variants.Variant`, shared with ch. 4's mixers): a backbone
hands the model config to :func:`attention_sublayer`, and the variant takes what it declares
(:meth:`Attention.config_kwargs`: the shared sizes plus its ``options``, e.g. GQA's ``n_kv_heads``).

Heads are laid out ``(batch, heads, length, head_dim)``. A projection may return a single head
(``heads == 1``) for some of Q, K, V: it is broadcast over the other tensors' heads without a copy.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.grouping import grouped_attention
from leanlm.modeling.joint_linear import joint_linear
# The registry is this folder's modules, each loaded when a model names one of its variants (leanlm.modeling.variants).
from leanlm.modeling.variants import ATTENTION, Variant


class Attention(Variant, nn.Module, abc.ABC):
    """Base class of the attention registry's variants.

    Args:
        d_model: width of the residual stream (d_m).
        n_heads: number of attention heads (n).
        head_dim: dimension of each head (d_h; the thesis fixes it to 64).
        dropout: dropout on the attention probabilities, applied only in training.
        causal: mask future keys (decoders).
        bias: give the projections biases (BERT does; counts exclude them either way).
    """

    # Table 3.4 row: memory complexity in n and the LaTeX of the Q/K/V parameter count (output
    # projection excluded) and of its excess over SHA. Each variant sets its own.
    complexity: ClassVar[str] = ""
    params_latex: ClassVar[str] = ""
    params_extra_latex: ClassVar[str] = ""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float = 0.0,
                 causal: bool = False, bias: bool = True):
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("head_dim", head_dim)):
            if int(value) != value or value < 1:
                raise ValueError(f"{type(self).__name__}: {name}={value!r} must be a positive integer")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{type(self).__name__}: dropout={dropout!r} must be in [0, 1)")
        self.d_model = int(d_model)
        self.n_heads = int(n_heads)
        self.head_dim = int(head_dim)
        self.dropout = float(dropout)
        self.causal = bool(causal)
        self.bias = bool(bias)
        # n head slots of d_h each are pooled by one projection back to d_m (W^O).
        self.output = nn.Linear(self.n_heads * self.head_dim, self.d_model, bias=self.bias)

    # ----------------------------------------------------------------- the registry contract
    @classmethod
    def config_kwargs(cls, config) -> dict:
        """The constructor's arguments a model config gives this variant: the shared sizes, and each of
        its ``options`` (ModelConfig fields) by name. Token mixers add the longest input (``max_len``)."""
        return dict(d_model=config.d_model, n_heads=config.n_heads, head_dim=config.head_dim,
                    dropout=config.attention_dropout, **{option: getattr(config, option) for option in cls.options})

    # ----------------------------------------------------------------- what a variant defines
    @staticmethod
    @abc.abstractmethod
    def qkv_parameter_formula(n: int, d: int) -> int:
        """Closed form of Table 3.4: Q/K/V weights of one sublayer with n heads of dim d, d_m = n*d."""

    def project(self, x: torch.Tensor, memory: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from ``x``, keys and values from ``memory``, each ``(B, heads, L, d_h)``.

        The default uses the ``query``/``key``/``value`` linear layers the subclass builds; the
        number of heads each returns is its output width over ``head_dim``. In self-attention
        (``memory is x``) the three are one GEMM (:func:`joint_linear`).
        """
        if memory is x:
            q, k, v = joint_linear(x, self.query, self.key, self.value)
        else:
            q, k, v = self.query(x), self.key(memory), self.value(memory)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def merge_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """``(B, n, L, d_h)`` -> ``(B, L, n*d_h)``, the input of the output projection."""
        batch, n, length, dim = heads.shape
        return heads.transpose(1, 2).reshape(batch, length, n * dim)

    def init_extra_parameters(self, std: float) -> None:
        """Initialise parameters that are not nn.Linear/nn.Embedding (e.g. head embeddings).

        The model's BERT-style init handles linear layers; variants with other parameters override
        this. The base variant has none, so there is nothing to do.
        """

    @property
    def score_heads(self) -> int:
        """How many distinct attention maps the variant computes (FLOP counting): n by default."""
        return self.n_heads

    # ----------------------------------------------------------------- the shared skeleton
    def linear(self, d_in: int, d_out: int) -> nn.Linear:
        """A projection with the sublayer's bias setting."""
        return nn.Linear(d_in, d_out, bias=self.bias)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(B, L, h*d_h)`` -> ``(B, h, L, d_h)``; h is inferred from the width."""
        batch, length, width = t.shape
        return t.view(batch, length, width // self.head_dim, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                kv: torch.Tensor | None = None) -> torch.Tensor:
        """Attend from ``x`` (B, L, d_m) to itself, or to ``kv`` (B, L_kv, d_m) for cross-attention.

        ``attention_mask`` is (B, L_kv), 1 for real tokens and 0 for padding. Returns (B, L, d_m).
        """
        memory = x if kv is None else kv
        q, k, v = self.project(x, memory)
        heads = self.attend(q, k, v, attention_mask)
        return self.output(self.merge_heads(heads))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Scaled dot-product attention (eq. 3.3) over all heads at once."""
        n = max(q.size(1), k.size(1), v.size(1))
        # A single shared head (SHA's, MQA's K/V) is broadcast as a stride-0 view, not copied; key/value
        # heads between 1 and n (GQA's groups) are broadcast by SDPA itself (leanlm.modeling.grouping).
        q, k, v = (t if t.size(1) != 1 else t.expand(-1, n, -1, -1) for t in (q, k, v))
        mask, is_causal = self.attention_bias(attention_mask, q.size(-2), k.size(-2), q)
        return grouped_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
                                 is_causal=is_causal)

    def attention_bias(self, attention_mask: torch.Tensor | None, q_len: int, kv_len: int,
                       like: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
        """The additive mask for SDPA and whether SDPA's own causal path can be used instead.

        Without padding, causal self-attention uses ``is_causal=True`` (no mask tensor: the
        fastest kernels). Otherwise masked positions get the dtype's most negative finite value
        rather than -inf, so a query whose keys are all masked gets uniform weights, not NaN.
        The causal mask is aligned to the end (query i sees keys j <= i + kv_len - q_len), which
        is what a decoder attending over cached keys needs.
        """
        if attention_mask is None:
            if not self.causal:
                return None, False
            if q_len == kv_len:
                return None, True
        allowed = None
        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.size(-1) != kv_len:
                raise ValueError(
                    f"attention_mask must be (batch, {kv_len}) with 1 for tokens and 0 for "
                    f"padding, got shape {tuple(attention_mask.shape)}"
                )
            allowed = attention_mask.to(torch.bool)[:, None, None, :]
        if self.causal:
            causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=like.device)
            causal = causal.tril(diagonal=kv_len - q_len)
            allowed = causal if allowed is None else allowed & causal
        bias = torch.zeros(allowed.shape, dtype=like.dtype, device=like.device)
        return bias.masked_fill(~allowed, torch.finfo(like.dtype).min), False

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}, "
                f"dropout={self.dropout}, causal={self.causal}")


_UNSET = object()


def build_attention(name: str, max_len=_UNSET, **kwargs) -> Attention:
    """Instantiate the attention variant registered as ``name`` from sizes (ConfigError if unknown).

    ``max_len`` reaches only the variants that size parameters by it (Linear token mixing), so callers
    need not know which variants care. Backbones build from the config instead (:func:`attention_sublayer`).
    """
    cls = ATTENTION.get(name)
    if getattr(cls, "needs_max_len", False) and max_len is not _UNSET:
        kwargs["max_len"] = max_len
    return cls(**kwargs)


def attention_sublayer(config, causal: bool, cross: bool = False) -> Attention:
    """The attention sublayer ``config.attention`` of a ch. 3 backbone's block (BERT: self, GPT-2: causal self,
    the encoder-decoder: all three kinds), built from the config: the variant takes what it declares.

    ConfigError if the variant lacks the form asked for: token mixers (FNet, Linear) have no
    cross-attention form, checked here when the model is built rather than at the first forward pass;
    variants raise it themselves for what else they cannot do (e.g. causal FNet).
    """
    cls = ATTENTION.get(config.attention)
    if cross and not getattr(cls, "supports_cross", True):
        raise ConfigError(
            f"attention {config.attention!r} has no cross-attention form, which the encoder-decoder's "
            f"decoder needs (it attends to the source); use a softmax variant such as 'mha' or 'mhe_mul'"
        )
    return cls(**cls.config_kwargs(config), causal=causal, bias=True)
