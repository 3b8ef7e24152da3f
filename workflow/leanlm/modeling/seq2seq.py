"""The Vaswani et al. (2017) encoder-decoder Transformer for WMT-14 en-de (§3.4.3, Tables 3.3, 3.15).

    model = build_model(ModelConfig(backbone="transformer", n_layers=6, n_decoder_layers=6, d_model=512,
                                    n_heads=8, head_dim=64, d_ff=2048, max_position=128, vocab_size=37000,
                                    type_vocab_size=0, attention="mhe_mul"), "seq2seq")

As in the paper: post-LN blocks (x = LN(x + Dropout(sublayer(x)))), a ReLU feed-forward network,
fixed sinusoidal positions added to embeddings scaled by sqrt(d_m), and ONE embedding matrix shared by
the source, the target and the pre-softmax projection (the BPE vocabulary is shared by both languages,
§3.4.4). The encoder has ``n_layers`` blocks, the decoder ``n_decoder_layers``; every attention
sublayer (encoder self, decoder causal self, decoder cross) is ``config.attention`` from the ch. 3
registry, so an MHE model differs from an MHA one only there, and counting finds all
``n_layers + 2 * n_decoder_layers`` sublayers (18 at BASE: Table 3.3's #params).

Token ids follow the translation tokenizer (leanlm.objectives.translation): <pad>=0, <unk>=1, <s>=2
(BOS, the decoder's first input), </s>=3 (EOS, ends source and target).

Decoding (:meth:`TransformerForTranslation.generate`) is batched greedy or beam search with an
incremental key/value cache: each step feeds only the newest target token; the decoder's
self-attention keys/values of earlier positions and the cross-attention keys/values of the source are
kept per layer. This works for every softmax variant because their keys and values at a position
depend on that position's hidden state only (MHA, SHA, MHE, MQA, SKV, EL-ATT all project position by
position). ``use_cache=False`` recomputes the whole prefix every step instead (same result; tested).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.attention import Attention, attention_sublayer
from leanlm.modeling.config import ModelConfig
# IGNORE_INDEX: the label of positions without a target; the translation objective imports it from here.
from leanlm.modeling.lm_loss import IGNORE_INDEX, vocab_cross_entropy  # noqa: F401
from leanlm.modeling.models import register_model
from leanlm.modeling.padding import padding_mask
from leanlm.modeling.recompute import BlockStack
from leanlm.modeling.vocab import real_logits, vocab_table

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

Cache = list[dict[str, tuple[torch.Tensor, torch.Tensor]]]  # per decoder layer: "self"/"cross" -> (k, v)


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_m)), PE(pos, 2i+1) = cos(...): the paper's (length, d_m) table."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    inverse_frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    angles = position * inverse_frequency  # (length, ceil(d_m / 2))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table



class FeedForward(nn.Module):
    """W2 ReLU(W1 x): the paper's position-wise network (d_m -> d_ff -> d_m).

    Dropout is where the paper puts it (on each sublayer's output, in the layer), not inside.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.intermediate = nn.Linear(config.d_model, config.d_ff)
        self.output = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(F.relu(self.intermediate(x)))


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward sublayers, each followed by residual + LayerNorm (post-LN)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attention = attention_sublayer(config, causal=False, cross=False)
        self.self_attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.self_attention_norm(x + self.dropout(self.self_attention(x, mask)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, feed-forward; post-LN each."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attention = attention_sublayer(config, causal=True, cross=False)
        self.self_attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.cross_attention = attention_sublayer(config, causal=False, cross=True)
        self.cross_attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None,
                cache: dict | None = None) -> torch.Tensor:
        """``cache`` None: the whole target prefix at once (training). A dict: ``x`` holds only the
        newest position(s) and the dict keeps this layer's keys/values between calls."""
        if cache is None:
            # No padding mask on the target: pads come after the real tokens, so the causal mask
            # already keeps them out of every real position (and SDPA keeps its mask-free path).
            attended = self.self_attention(x)
            x = self.self_attention_norm(x + self.dropout(attended))
            attended = self.cross_attention(x, memory_mask, kv=memory)
        else:
            attended = _cached_attention(self.self_attention, x, x, None, cache, "self", grow=True)
            x = self.self_attention_norm(x + self.dropout(attended))
            attended = _cached_attention(self.cross_attention, x, memory, memory_mask, cache, "cross", grow=False)
        x = self.cross_attention_norm(x + self.dropout(attended))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


def _cached_attention(module: Attention, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                      cache: dict, key: str, grow: bool) -> torch.Tensor:
    """The attention sublayer's forward for new queries ``x`` with keys/values kept in ``cache[key]``.

    ``grow``: self-attention, whose keys/values gain the new positions (appended along the length);
    otherwise cross-attention, whose keys/values come from the fixed ``memory`` once and are reused
    (later calls project a zero-length memory, so only the queries are computed).
    """
    if grow or key not in cache:
        q, k, v = module.project(x, memory)
        if grow and key in cache:
            old_k, old_v = cache[key]
            shared = old_k is old_v  # SKV / EL-ATT use one tensor as keys and values: keep it one
            k = torch.cat([old_k, k], dim=2)
            v = k if shared else torch.cat([old_v, v], dim=2)
        cache[key] = (k, v)
    else:
        q, _, _ = module.project(x, memory[:, :0])
        k, v = cache[key]
    heads = module.attend(q, k, v, mask)
    return module.output(module.merge_heads(heads))


class Embedder(nn.Module):
    """Shared token embedding x sqrt(d_m) + sinusoidal position, then dropout (encoder and decoder)."""

    def __init__(self, config: ModelConfig, tokens: nn.Embedding):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.d_model)
        self.max_position = config.max_position
        # Fixed, not learned: a buffer, left out of the state dict (rebuilt from the config on load).
        self.register_buffer("positions", sinusoidal_positions(config.max_position, config.d_model),
                             persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        length = ids.size(1)
        if offset + length > self.max_position:
            raise ValueError(
                f"sequence of {offset + length} tokens is longer than the model's max_position="
                f"{self.max_position}; truncate inputs (or generate fewer tokens) to {self.max_position}"
            )
        embedded = self.tokens(ids) * self.scale + self.positions[offset : offset + length].to(self.tokens.weight.dtype)
        return self.dropout(embedded)


class TransformerEncoder(BlockStack, nn.Module):
    """The source side's blocks (each checkpointed when ``activation_checkpointing``: leanlm.modeling.recompute)."""

    def __init__(self, config: ModelConfig, embed: Embedder):
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = self.run_block(layer, x, attention_mask)
        return x


class TransformerDecoder(BlockStack, nn.Module):
    """The target side's blocks (checkpointed as the encoder's when training; decoding with a cache never is)."""

    def __init__(self, config: ModelConfig, embed: Embedder):
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))

    def forward(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None,
                cache: Cache | None = None, offset: int = 0) -> torch.Tensor:
        x = self.embed(decoder_input_ids, offset)
        for i, layer in enumerate(self.layers):
            # A cached step appends to its cache: never recomputed (decoding runs without gradients anyway).
            x = self.run_block(layer, x, memory, memory_mask, None) if cache is None else layer(x, memory, memory_mask, cache[i])
        return x


@torch.no_grad()
def init_transformer_weights(module: nn.Module, config: ModelConfig) -> None:
    """fairseq's init of the from-scratch Transformer.

    Linear weights Xavier-uniform, biases 0; the shared embedding N(0, d_m^-1/2) with the padding row
    0, so that after the sqrt(d_m) scaling token vectors have unit scale, like the positions, and
    the tied output projection starts with logits of order 1. LayerNorm 1/0. Attention variants'
    extra parameters (head embeddings, ...) get their own init at ``initializer_range``.
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            m.weight.normal_(0.0, config.d_model ** -0.5)
            if m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.zero_()
        elif isinstance(m, Attention):
            m.init_extra_parameters(config.initializer_range)


@register_model("transformer", "seq2seq")
class TransformerForTranslation(nn.Module):
    """Encoder-decoder with a shared embedding/softmax matrix, trained with label-smoothed cross-entropy.

    ``label_smoothing`` (0.1 as in Vaswani et al.) only affects the training loss.
    """

    takes_return_logits = True  # forward(return_logits=False): the loss alone (the engine's training step)

    def __init__(self, config: ModelConfig, label_smoothing: float = 0.1):
        super().__init__()
        if config.backbone != "transformer":
            raise ConfigError(f"TransformerForTranslation needs backbone 'transformer', got {config.backbone!r}")
        if config.n_decoder_layers < 1:
            raise ConfigError("the encoder-decoder needs n_decoder_layers >= 1 (the thesis uses 6); "
                              "set n_decoder_layers in the profile's models block")
        if config.embedding != "standard":
            raise ConfigError(f"the encoder-decoder takes the standard embedding only, got "
                              f"embedding={config.embedding!r}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing={label_smoothing!r} must be in [0, 1)")
        self.config = config
        self.label_smoothing = float(label_smoothing)
        # config.vocab_rows: padded for the tensor cores (leanlm.modeling.vocab); one matrix for both sides
        self.embed_tokens = vocab_table(nn.Embedding(config.vocab_rows, config.d_model, padding_idx=config.pad_token_id),
                                        config.vocab_size)
        embed = Embedder(config, self.embed_tokens)
        self.encoder = TransformerEncoder(config, embed)
        self.decoder = TransformerDecoder(config, embed)
        self.lm_head = None if config.tie_word_embeddings else vocab_table(
            nn.Linear(config.d_model, config.vocab_rows, bias=False), config.vocab_size)
        init_transformer_weights(self, config)

    # ------------------------------------------------------------------------------ training
    def output_embeddings(self) -> torch.Tensor:
        """The (vocab_rows, d_m) pre-softmax matrix: the shared embedding (or the untied head)."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Pre-softmax projection over the real vocabulary (padded rows cut off: leanlm.modeling.vocab)."""
        return real_logits(F.linear(hidden, self.output_embeddings()), self.config.vocab_size)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encoder output and the mask the decoder's cross-attention uses (None when nothing is padded)."""
        attention_mask = padding_mask(attention_mask)  # None without padding: SDPA's mask-free path
        return self.encoder(input_ids, attention_mask), attention_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, return_logits: bool = True) -> dict[str, torch.Tensor | None]:
        """Returns ``dict(loss, logits)``: logits (B, T, V) for every decoder position.

        ``decoder_input_ids`` is <s> + target, ``labels`` target + </s> with -100 at padding; the
        loss is the label-smoothed cross-entropy averaged over the labelled tokens.
        ``return_logits=False`` (the training step): the loss alone, in chunks of rows so the logits
        never exist whole (leanlm.modeling.lm_loss); logits is None.
        """
        if decoder_input_ids is None:
            raise ValueError("TransformerForTranslation.forward needs decoder_input_ids (<s> + target tokens)")
        memory, memory_mask = self.encode(input_ids, attention_mask)
        hidden = self.decoder(decoder_input_ids, memory, memory_mask)
        if labels is None:
            return {"loss": None, "logits": self.logits(hidden)}
        loss, logits = vocab_cross_entropy(hidden, self.output_embeddings(), None, labels, self.config.vocab_size,
                                           label_smoothing=self.label_smoothing, return_logits=return_logits)
        return {"loss": loss, "logits": logits}

    # ------------------------------------------------------------------------------ decoding
    def _step_logits(self, tokens: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None,
                     cache: Cache | None) -> torch.Tensor:
        """Log-probabilities (N, V) of the next token after ``tokens`` (N, t)."""
        if cache is None:  # recomputation: the whole prefix every step
            hidden = self.decoder(tokens, memory, memory_mask)[:, -1]
        else:
            hidden = self.decoder(tokens[:, -1:], memory, memory_mask, cache, offset=tokens.size(1) - 1)[:, 0]
        return F.log_softmax(self.logits(hidden).float(), dim=-1)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, max_length: int = 100,
                 beam_size: int = 4, length_penalty: float = 0.6, *, use_cache: bool = True,
                 bos_token_id: int = BOS_ID, eos_token_id: int = EOS_ID) -> torch.Tensor:
        """Translate a batch: (B, S) source ids -> (B, L) target ids without <s>, ending in </s>
        (unless ``max_length`` tokens were produced first) and padded with ``pad_token_id``.

        ``beam_size`` 1 is greedy decoding; otherwise beam search, hypotheses ranked by
        log-probability / ((5 + length) / 6) ** ``length_penalty`` (GNMT's penalty, which Vaswani
        et al. used with alpha 0.6 and beam 4). Runs in eval mode; the caller's mode is restored.
        """
        if beam_size < 1 or max_length < 1:
            raise ValueError(f"beam_size={beam_size} and max_length={max_length} must be >= 1")
        if max_length > self.config.max_position:
            raise ValueError(f"max_length={max_length} exceeds the model's max_position="
                             f"{self.config.max_position} (decoder positions); lower max_length")
        was_training = self.training
        self.eval()
        try:
            memory, memory_mask = self.encode(input_ids, attention_mask)
            search = _greedy if beam_size == 1 else _beam_search
            return search(self, memory, memory_mask, max_length, beam_size, length_penalty, use_cache,
                          bos_token_id, eos_token_id)
        finally:
            self.train(was_training)

    def new_cache(self) -> Cache:
        return [{} for _ in self.decoder.layers]


def _greedy(model: TransformerForTranslation, memory, memory_mask, max_length, beam_size, length_penalty,
            use_cache, bos, eos) -> torch.Tensor:
    batch = memory.size(0)
    pad = model.config.pad_token_id
    tokens = torch.full((batch, 1), bos, dtype=torch.long, device=memory.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=memory.device)
    cache = model.new_cache() if use_cache else None
    for _ in range(max_length):
        next_token = model._step_logits(tokens, memory, memory_mask, cache).argmax(-1)
        next_token = next_token.masked_fill(finished, pad)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= next_token == eos
        if bool(finished.all()):
            break
    return tokens[:, 1:]


def gnmt_length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """((5 + |Y|) / 6) ** alpha (Wu et al., 2016)."""
    return ((5.0 + length.float()) / 6.0) ** alpha


def _beam_search(model: TransformerForTranslation, memory, memory_mask, max_length, beam_size, length_penalty,
                 use_cache, bos, eos) -> torch.Tensor:
    """Batched beam search over B x K hypotheses, all tensors shaped (B*K, ...).

    A hypothesis that emitted </s> stays in its beam with a frozen score and may only be extended by
    padding (log-probability 0), so live and finished hypotheses compete for the K slots by their
    length-penalised scores, and the search ends when every beam of every sentence is finished.
    """
    batch, device = memory.size(0), memory.device
    k = beam_size
    pad = model.config.pad_token_id
    memory = memory.repeat_interleave(k, dim=0)
    if memory_mask is not None:
        memory_mask = memory_mask.repeat_interleave(k, dim=0)
    tokens = torch.full((batch * k, 1), bos, dtype=torch.long, device=device)
    # Only the first beam of each sentence is live at the start, so the K beams do not start as copies.
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0
    scores = scores.view(-1)
    finished = torch.zeros(batch * k, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch * k, dtype=torch.long, device=device)  # tokens generated, </s> included
    cache = model.new_cache() if use_cache else None
    for _ in range(max_length):
        log_probs = model._step_logits(tokens, memory, memory_mask, cache)  # (B*K, V)
        vocab = log_probs.size(-1)
        # Finished hypotheses: the only continuation is <pad> at no cost.
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[:, pad] = 0.0
        log_probs = torch.where(finished[:, None], frozen, log_probs)
        new_lengths = torch.where(finished, lengths, lengths + 1)
        candidate = scores[:, None] + log_probs  # (B*K, V)
        ranked = candidate / gnmt_length_penalty(new_lengths, length_penalty)[:, None]
        best, flat = ranked.view(batch, k * vocab).topk(k, dim=-1)  # (B, K)
        beam = (flat // vocab + torch.arange(batch, device=device)[:, None] * k).view(-1)
        next_token = (flat % vocab).view(-1)
        scores = candidate.view(-1)[beam * vocab + next_token]
        lengths = new_lengths[beam]
        finished = finished[beam] | (next_token == eos)
        tokens = torch.cat([tokens[beam], next_token[:, None]], dim=1)
        if cache is not None:
            for layer in cache:  # self-attention keys/values follow their hypotheses
                k_self, v_self = layer["self"]
                reordered = k_self.index_select(0, beam)
                layer["self"] = (reordered, reordered if v_self is k_self else v_self.index_select(0, beam))
        if bool(finished.all()):
            break
    final = (scores / gnmt_length_penalty(lengths, length_penalty)).view(batch, k)
    best_beam = final.argmax(-1) + torch.arange(batch, device=device) * k
    return tokens[best_beam, 1:]
