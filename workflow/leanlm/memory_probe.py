"""The GPU memory of one training step, measured without a GPU: the real model on the meta device.

:func:`measure_step` builds a run's model (the real classes) under PyTorch's ``FakeTensorMode``, whose
tensors have shapes, dtypes and a device but their storage on the ``meta`` device, so a 1.7B model
and its activations cost no memory, and runs one micro-batch forward + backward as the training
engine does (bf16 autocast, the loss alone, activation checkpointing as asked, the gradients already
allocated as on a later micro-batch). A dispatch mode (:class:`LiveBytes`) follows every storage the
step creates until it is freed, which gives (:class:`StepBytes`)

- ``activations``: the bytes alive once the forward is over and autocast has let go of its cache: what
  autograd keeps for the backward (saved tensors, the bf16 copies of the weights they include) and the
  loss;
- the peaks: the most bytes alive at any moment of the forward (autocast's cache at its end, the loss
  chunk's logits) and of the backward (gradient temporaries, a recomputed block), beyond the parameters
  and their gradients, which exist before the step (:func:`static_bytes` counts them with AdamW's state).

The fake tensors live on a "cpu" device label, so autocast's CPU policy applies: matmuls (and SDPA)
in bf16 as on CUDA; the few ops CUDA's policy runs in float32 and the CPU's does not (exp, pow, softmax,
layer_norm, ... on bf16 inputs) see float32 inputs in these models anyway (the residual stream, RMSNorm
and the mixers' explicit float32 sums), so the difference is small. Where the CPU and CUDA kernels keep
different tensors, :func:`cuda_kernels` substitutes what the CUDA kernel keeps:

- ``F.scaled_dot_product_attention``: a fused kernel (flash attention, or memory-efficient attention
  with a mask), which keeps q, k, v, the output, a float32 log-sum-exp per query and the mask, never
  the (L x L) probabilities the CPU's math path saves; its backward takes a float32 dq accumulator;
- ``F.dropout``: ``native_dropout``, which keeps a bool mask (the CPU path keeps one in the input's dtype);

and :func:`data_free` answers the forward's data-dependent calls: ``bool(tensor)`` (a check, or "drop
the mask when nothing is padded") is False; ``torch.unique`` (EELBERT's distinct tokens) returns every
row as distinct, an upper bound. Device-dependent choices of the kernels take their GPU values
(Approximate's Taylor kernel batches its chunks by ``GROUP_BYTES["default"]`` and pads its GEMM rows by
``ALIGN_BYTES["default"]``, as on a GPU).

The LM loss's chunks (leanlm.modeling.lm_loss) run as :class:`_LossChunk`, a stand-in with their inputs,
outputs and gradients but no logits, for speed; one real chunk's excess over it is measured once per
shape (:func:`loss_chunk_excess`) and added to both peaks. The last chunk, which lm_loss does not
checkpoint, runs for real (its log-softmax is kept for the backward).

Not modelled: the CUDA caching allocator's rounding and fragmentation, the CUDA context, NCCL's buffers
under DDP and torch.compile's workspaces (leanlm.memory keeps a margin for them; docs/memory.md).
"""

from __future__ import annotations

import contextlib
import functools
import math
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from leanlm.modeling.config import ModelConfig

# bf16 autocast, as the engine trains on CUDA (TrainConfig.precision "auto").
AUTOCAST_DTYPE = torch.bfloat16


@dataclass(frozen=True)
class StepBytes:
    """Bytes of one micro-batch's step beyond the parameters and gradients (module docstring), at four
    moments: the most alive during the forward, at its end (autocast's cache of bf16 weight copies
    still held), once autocast has let its cache go (``activations``: what waits for the backward),
    and the most alive during the backward."""

    forward_peak: int
    forward_end: int
    activations: int
    backward_peak: int

    @property
    def peak(self) -> int:
        return max(self.forward_peak, self.backward_peak)


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created inside the mode that are still alive, and their maximum since the
    last :meth:`restart`; a storage is counted once however many tensors view it, and leaves the count
    when it is freed."""

    def __init__(self):
        super().__init__()
        self.live, self.peak = 0, 0
        self._seen: dict[int, tuple] = {}

    def restart(self) -> None:
        """Start a new maximum from what is alive now."""
        self.peak = self.live

    def _free(self, key: int, size: int) -> None:
        self._seen.pop(key, None)
        self.live -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in self._seen:
                    self._seen[key] = (func, t.dtype, tuple(t.shape))  # what made it: for debugging
                    size = storage.nbytes()
                    self.live += size
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._free, key, size)
        return out


class _FusedAttention(torch.autograd.Function):
    """What a fused CUDA attention kernel keeps and allocates, on fake tensors (no arithmetic)."""

    @staticmethod
    def forward(ctx, q, k, v, mask):
        out = q.new_empty((*q.shape[:-1], v.shape[-1]))
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)  # log-sum-exp per query (B, H, L)
        # The output last: autograd packs a saved output after the other saved tensors when it checks a
        # checkpointed block's recomputation, so anywhere else the two orders would differ.
        ctx.save_for_backward(q, k, v, lse, *(() if mask is None else (mask,)), out)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, *_ = ctx.saved_tensors
        accumulator = torch.empty(q.shape, dtype=torch.float32, device=q.device)  # flash's float32 dq
        del accumulator
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None


@contextlib.contextmanager
def data_free():
    """The forward's data-dependent calls answered without data (module docstring): ``bool(tensor)``
    is False and ``torch.unique`` keeps every row, while the context is open."""
    own = torch.Tensor.__dict__.get("__bool__")  # None: inherited from the C base class
    saved = torch.unique
    torch.Tensor.__bool__, torch.unique = lambda self: False, _all_distinct
    try:
        yield
    finally:
        torch.unique = saved
        if own is None:
            del torch.Tensor.__bool__
        else:
            torch.Tensor.__bool__ = own


@contextlib.contextmanager
def cuda_kernels():
    """``F.scaled_dot_product_attention`` and ``F.dropout`` keep what their CUDA kernels keep (module
    docstring) while the context is open, in the forward and in the backward's recomputations alike
    (the model code looks both up in torch.nn.functional when it calls them)."""
    saved = F.scaled_dot_product_attention, F.dropout
    F.scaled_dot_product_attention, F.dropout = _attention, _dropout
    try:
        yield
    finally:
        F.scaled_dot_product_attention, F.dropout = saved


class _LossChunk(torch.autograd.Function):
    """A chunk of the LM loss (leanlm.modeling.lm_loss) without its logits: no saved tensor, the
    gradients of its inputs. Probes use it for speed (a real chunk costs ~100 dispatches of fake
    tensors, and a 2048-token micro-batch has ~50 chunks); what a real chunk adds -- its logits, their
    float32 copy and gradient -- is measured once per shape (:func:`loss_chunk_excess`) and added."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets):
        # What a real chunk's checkpoint keeps: its inputs (views of tensors that exist anyway, and the
        # shifted targets, which the chunks keep alive).
        ctx.save_for_backward(hidden, weight, targets, *(() if bias is None else (bias,)))
        return hidden.new_zeros((), dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, _, *bias = ctx.saved_tensors
        return (torch.empty_like(hidden), torch.empty_like(weight), torch.empty_like(bias[0]) if bias else None,
                None)


@dataclass(frozen=True)
class LossShape:
    """What a loss chunk's memory depends on."""

    rows: int
    hidden_dtype: torch.dtype
    weight_shape: tuple[int, int]
    bias: bool
    vocab_size: int
    label_smoothing: float


@contextlib.contextmanager
def loss_stand_in(seen: list):
    """Loss chunks but the last run as :class:`_LossChunk` while the context is open (the last, which
    lm_loss does not checkpoint, runs as it is); ``seen`` gets the :class:`LossShape` of the largest chunk."""
    from leanlm.modeling import lm_loss

    def stand_in(hidden, weight, bias, targets, vocab_size, label_smoothing, last=False):
        shape = LossShape(hidden.size(0), hidden.dtype, tuple(weight.shape), bias is not None, vocab_size,
                          float(label_smoothing))
        if not seen or shape.rows > seen[0].rows:
            seen[:] = [shape]
        if last:  # not checkpointed (lm_loss): its log-softmax stays for the backward, so it runs for real
            return saved(hidden, weight, bias, targets, vocab_size, label_smoothing, last=True)
        with torch.no_grad():  # the projection's bf16 weight, which autocast caches until the forward ends
            F.linear(hidden[:0], weight, bias)
        return _LossChunk.apply(hidden, weight, bias, targets)

    saved, lm_loss._chunk = lm_loss._chunk, stand_in
    try:
        yield
    finally:
        lm_loss._chunk = saved


@functools.lru_cache(maxsize=None)
def loss_chunk_excess(shape: LossShape) -> tuple[int, int]:
    """(forward, backward): the most bytes a real loss chunk of ``shape`` has alive beyond what
    :class:`_LossChunk` has, in its forward and in its backward (its checkpointed recomputation)."""
    from leanlm.modeling import lm_loss

    peaks = []
    for chunk in (lm_loss._chunk, lambda h, w, b, t, *_: _LossChunk.apply(h, w, b, t)):
        with FakeTensorMode():
            hidden = torch.empty(shape.rows, shape.weight_shape[1], dtype=shape.hidden_dtype, requires_grad=True)
            weight = torch.empty(shape.weight_shape, requires_grad=True)
            bias = torch.empty(shape.weight_shape[0], requires_grad=True) if shape.bias else None
            targets = torch.zeros(shape.rows, dtype=torch.long)
            for p in (weight, bias):
                if p is not None:
                    p.grad = torch.zeros_like(p)
            tracker = LiveBytes()
            with tracker:
                with torch.autocast("cpu", dtype=AUTOCAST_DTYPE):
                    loss = chunk(hidden, weight, bias, targets, shape.vocab_size, shape.label_smoothing)
                forward_peak, forward_end = tracker.peak, tracker.live
                tracker.restart()
                start = tracker.live
                loss.backward()
                peaks.append((forward_peak, forward_end, start, tracker.peak))
    real, stand = peaks
    # Measured from the stand-in's end of forward and start of backward (not its peaks, which in a model
    # may fall elsewhere): an upper bound on what the real chunk adds wherever it runs.
    return max(0, real[0] - stand[1]), max(0, real[3] - stand[2])


def _attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if torch.is_autocast_enabled("cpu"):  # SDPA is one of autocast's bf16 ops
        q, k, v = (t.to(AUTOCAST_DTYPE) for t in (q, k, v))
    return _FusedAttention.apply(q, k, v, attn_mask)


def _dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return input
    return torch.native_dropout(input, p, True)[0]


def _all_distinct(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    rows = input.shape[0] if dim == 0 else input.numel()
    distinct = input if dim == 0 else input.reshape(-1)
    out = [distinct]
    if return_inverse:
        out.append(torch.arange(rows, device=input.device).view(input.shape[:1] if dim == 0 else input.shape))
    if return_counts:
        out.append(torch.ones(rows, dtype=torch.long, device=input.device))
    return out[0] if len(out) == 1 else tuple(out)


@contextlib.contextmanager
def _gpu_kernel_choices():
    """Device-dependent kernel choices as on a GPU while measuring (module docstring)."""
    from leanlm.modeling.mixers import taylor

    tables = (taylor.GROUP_BYTES, taylor.ALIGN_BYTES)
    saved = [table["cpu"] for table in tables]
    for table in tables:
        table["cpu"] = table["default"]
    try:
        yield
    finally:
        for table, value in zip(tables, saved):
            table["cpu"] = value


def static_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes that live for the whole run: float32 weights (padded vocabulary rows included, tied tensors
    once) and buffers, their float32 gradients and AdamW's two float32 moments per trainable weight."""
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return {"weights": sum(p.numel() * p.element_size() for p in params) + buffers,
            "gradients": 4 * trainable, "optimizer": 8 * trainable}


def fake_batch(model: nn.Module, head: str, batch_size: int, seq_len: int, mask_prob: float = 0.15) -> dict:
    """A micro-batch of the shapes the run's objective feeds ``head`` (packed rows: no padding mask);
    call inside the model's FakeTensorMode."""
    from leanlm.modeling.hash_features import codebook_settings, embedding_features

    shape = (batch_size, seq_len)
    ids = torch.zeros(shape, dtype=torch.long)
    config = model.config
    features = {}
    for name in embedding_features(config):
        if name == "hash_bits":
            features[name] = torch.zeros(*shape, codebook_settings(config)["n_bits"])
        elif name == "hash_buckets":
            features[name] = torch.zeros(shape, dtype=torch.long)
        else:  # char_ngram_hashes (EELBERT): its n-gram lengths x characters
            words = model.encoder.embeddings.word_embeddings
            features[name] = torch.zeros(*shape, words.n_max, words.max_chars, dtype=torch.long)
    if head == "mlm":  # the masked positions only (MLMBatches: their flat indices)
        scored = max(1, math.ceil(batch_size * seq_len * mask_prob))
        return {"input_ids": ids, "labels": ids, "masked_positions": torch.arange(scored), **features}
    if head == "seq2seq":
        return {"input_ids": ids, "decoder_input_ids": ids, "labels": ids}
    return {"input_ids": ids, "labels": ids, **features}  # causal_lm; shuffle_random's 3 classes


def measure_step(model_config: ModelConfig, head: str, batch_size: int, seq_len: int, *,
                 checkpointing: bool = False, mask_prob: float = 0.15, fake: bool = True,
                 exact_loss: bool = False, head_options: dict | None = None) -> tuple[StepBytes, dict[str, int]]:
    """One training step of the ``head`` model of ``model_config`` (built with ``head_options``, e.g. S+R's
    ``head_type``) at ``batch_size`` x ``seq_len``: its :class:`StepBytes` and the model's :func:`static_bytes`.

    The loss's chunks run as :class:`_LossChunk`, and a real chunk's excess is added to both peaks
    (an upper bound: it is added to the peak wherever that falls); ``exact_loss`` runs the real chunks
    instead. ``fake=False`` runs the step on real CPU tensors (tests compare the forms on small models)."""
    from leanlm.modeling.models import build_model, loss_only_kwargs
    from leanlm.modeling.recompute import set_activation_checkpointing

    shapes: list[LossShape] = []
    stand_in = contextlib.nullcontext() if exact_loss else loss_stand_in(shapes)
    with (FakeTensorMode() if fake else contextlib.nullcontext()), cuda_kernels(), _gpu_kernel_choices(), stand_in:
        model = build_model(model_config, head, **(head_options or {})).train()
        if checkpointing:
            set_activation_checkpointing(model)
        batch = fake_batch(model, head, batch_size, seq_len, mask_prob)
        for p in model.parameters():  # a later micro-batch: the gradients exist, the backward adds to them
            p.grad = torch.zeros_like(p)
        tracker = LiveBytes()
        with tracker:
            with data_free(), torch.autocast("cpu", dtype=AUTOCAST_DTYPE):
                loss = model(**batch, **loss_only_kwargs(model))["loss"]
                forward_peak, forward_end = tracker.peak, tracker.live
            activations = tracker.live
            tracker.restart()
            loss.backward()
            del loss
        backward_peak, static = tracker.peak, static_bytes(model)
    extra_forward, extra_backward = loss_chunk_excess(shapes[0]) if shapes else (0, 0)
    return StepBytes(forward_peak + extra_forward, forward_end, activations, backward_peak + extra_backward), static
