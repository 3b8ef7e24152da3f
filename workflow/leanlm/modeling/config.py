"""The model configuration: one JSON-serialisable dataclass shared by every backbone.

A checkpoint's ``config.json`` holds ``ModelConfig.to_dict()``; a run's model is the profile's
``models.<backbone>`` size with the experiment's fields (e.g. ``attention``) laid over it, turned
into a ``ModelConfig`` with :meth:`ModelConfig.from_dict`, which names the offending key and the
place it came from when something is wrong.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Mapping

from leanlm.errors import ConfigError

# Backbone families (DESIGN §6): BERT-style encoder (ch. 2, 3), GPT-2-style decoder (ch. 3),
# the Vaswani encoder-decoder for translation (ch. 3) and the Qwen2.5-style decoder (ch. 4).
BACKBONES = ("bert", "gpt2", "transformer", "qwen")
POSITIONS = ("learned", "sinusoidal")


@dataclass(kw_only=True)
class ModelConfig:
    """Sizes and switches of a transformer backbone (names follow the thesis and BERT).

    ``head_dim`` is given separately from ``d_model`` because the thesis fixes the head dimension
    (64) while varying heads; MHA's projections are ``d_model x n_heads*head_dim``.
    ``position_offset`` shifts position ids: BERT counts from 0, RoBERTa from ``padding_idx + 1``
    (= 2), which is why RoBERTa's position table has 514 rows for 512 tokens.
    """

    backbone: str = "bert"
    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    head_dim: int
    d_ff: int
    max_position: int
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    attention: str = "mha"
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    initializer_range: float = 0.02
    position_offset: int = 0
    # BERT encoders' positions: a "learned" table (BERT) or "sinusoidal", the fixed table of Vaswani et al.
    # with no parameters (ProFormer, whose Table 2.2 count has no position table; DESIGN §8).
    positions: str = "learned"
    # Word embedding, chosen by name from the embeddings registry ("standard" = nn.Embedding;
    # ch. 2's hash embeddings and the seeds' BERT-Hash / EELBERT); its own settings go in
    # ``embedding_options`` (e.g. {"hash": "md5", "bits": 128}).
    embedding: str = "standard"
    embedding_options: dict = dataclasses.field(default_factory=dict)
    # Encoder-decoder ("transformer"): decoder depth; n_layers is the encoder's. 0 elsewhere.
    n_decoder_layers: int = 0
    # Key/value heads (0 = n_heads, i.e. MHA; fewer = GQA): an option of the variants that declare it (ch. 3's
    # gqa, ch. 4's projected mixers; leanlm.modeling.variants). Qwen-style decoders (ch. 4): RMSNorm on
    # queries and keys (Qwen3), RoPE base, and the layer layout that says which layers use
    # ``attention`` (the others use "standard"; DESIGN §8, Table 4.11).
    n_kv_heads: int = 0
    qk_norm: bool = False
    rope_theta: float = 10000.0
    layout: str = "uniform"
    tie_word_embeddings: bool = True
    # Rows of the vocabulary tables (word embedding, output head) are rounded up to a multiple of this,
    # so the output projection's matmul has tensor-core-friendly sizes; 1 = no padding. The padded rows
    # are never counted as parameters and their logits never reach a loss, softmax or argmax
    # (leanlm.modeling.vocab). Checkpoints written before the option existed load with 1 (checkpoint.py).
    pad_vocab_to: int = 64

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str = "model config") -> None:
        """Raise ConfigError naming the field and value if the configuration is impossible."""
        if self.backbone not in BACKBONES:
            raise ConfigError(
                f"{where}: backbone={self.backbone!r} is not supported here; use one of {BACKBONES}"
            )
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "head_dim", "d_ff",
                     "max_position", "pad_vocab_to"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{where}: {name}={value!r} must be a positive integer")
        # Decoders have no token types; 0 means "no token-type embedding".
        for name in ("type_vocab_size", "n_decoder_layers", "n_kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: {name}={value!r} must be a non-negative integer")
        if not isinstance(self.embedding_options, dict):
            raise ConfigError(f"{where}: embedding_options must be a mapping, got "
                              f"{type(self.embedding_options).__name__}")
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{where}: {name}={value!r} must be a probability in [0, 1)")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(
                f"{where}: pad_token_id={self.pad_token_id} is outside the vocabulary "
                f"(vocab_size={self.vocab_size})"
            )
        if self.position_offset < 0 or self.position_offset >= self.max_position:
            raise ConfigError(
                f"{where}: position_offset={self.position_offset} must be in [0, max_position)"
            )
        if self.positions not in POSITIONS:
            raise ConfigError(f"{where}: positions={self.positions!r} is unknown; use one of {POSITIONS}")
        if self.layer_norm_eps <= 0 or self.initializer_range <= 0:
            raise ConfigError(f"{where}: layer_norm_eps and initializer_range must be > 0")
        # Ch. 4's token mixers live in their own registry (they need the block's context, e.g.
        # RndEmbQK's fixed sequence); a name must be known to one of the two.
        known = known_attention_names()
        if self.attention not in known:
            raise ConfigError(
                f"{where}: attention={self.attention!r} is unknown; known: {', '.join(sorted(known))}"
            )
        # Each variant the model builds takes the options it declares (n_kv_heads: GQA) and checks them;
        # imported here: the variants are heavier and config must stay importable alone.
        from leanlm.modeling.variants import check_variants

        check_variants(self, where)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_heads, or n_heads when 0 (plain multi-head attention)."""
        return self.n_kv_heads or self.n_heads

    @property
    def vocab_rows(self) -> int:
        """Rows of the vocabulary tables: ``vocab_size`` rounded up to a multiple of ``pad_vocab_to``."""
        return -(-self.vocab_size // self.pad_vocab_to) * self.pad_vocab_to

    @property
    def max_tokens(self) -> int:
        """Longest input the position table allows (RoBERTa: 514 rows - offset 2 = 512)."""
        return self.max_position - self.position_offset

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "model config") -> "ModelConfig":
        """Build from a mapping; unknown or missing keys raise ConfigError naming them and ``where``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping of model settings, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{where}: unknown model key(s) {unknown}; allowed keys: {', '.join(sorted(known))}"
            )
        required = {
            f.name for f in fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(data))
        if missing:
            raise ConfigError(f"{where}: missing model key(s) {missing}")
        try:
            return cls(**dict(data))
        except ConfigError as err:
            # __post_init__ validates under the generic name; say where the values came from.
            message = str(err).removeprefix("model config: ")
            raise ConfigError(f"{where}: {message}") from None

    def replace(self, **changes: Any) -> "ModelConfig":
        """A copy with some fields changed (validated again)."""
        return self.from_dict({**self.to_dict(), **changes})

    @classmethod
    def preset(cls, size: str, **overrides: Any) -> "ModelConfig":
        """A named size (``tiny``, ``small``, ``base``, ``large``), with fields overridden."""
        if size not in PRESETS:
            raise ConfigError(f"unknown model size {size!r}; known: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[size], **overrides}, where=f"preset {size!r}")


def known_attention_names() -> set[str]:
    """Every attention name a config may use: ch. 3's registry plus ch. 4's, where installed."""
    from leanlm.modeling.variants import ATTENTION, MIXERS

    return set(ATTENTION.names()) | set(MIXERS.names())  # read from the folders' sources: no variant imported


# Sizes for benchmarks and tests. `base` is BERT-base (§3.4.3), `large` BERT-large; `tiny` matches
# the smoke profile's backbone; head_dim is 64 wherever the thesis fixes it.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(vocab_size=4096, n_layers=2, d_model=64, n_heads=4, head_dim=16, d_ff=256,
                 max_position=128),
    "small": dict(vocab_size=30522, n_layers=4, d_model=256, n_heads=4, head_dim=64, d_ff=1024,
                  max_position=512),
    "base": dict(vocab_size=30522, n_layers=12, d_model=768, n_heads=12, head_dim=64, d_ff=3072,
                 max_position=512),
    "large": dict(vocab_size=30522, n_layers=24, d_model=1024, n_heads=16, head_dim=64, d_ff=4096,
                  max_position=512),
}
