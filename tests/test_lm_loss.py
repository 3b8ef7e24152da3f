"""The LM loss without a second copy of the logits (issue 23, GPU first contact): next-token targets
shifted in place of slicing the logits, and the chunked projection + cross-entropy the training step
uses (``return_logits=False``), equal in loss and gradients to the whole computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from leanlm.modeling import lm_loss
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.lm_loss import IGNORE_INDEX, shift_left, vocab_cross_entropy
from leanlm.modeling.models import build_model

V, ROWS, D = 37, 64, 16  # a vocabulary that is no multiple of 64: 27 padded rows at pad_vocab_to 64


@pytest.fixture
def small_chunks(monkeypatch):
    # 7 rows a chunk (7 x 64 padded rows fit 450): 13 chunks over 90 rows, the last one short.
    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 450)


def _inputs(seed=0, rows=90, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, D, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(ROWS, D, generator=g, dtype=dtype, requires_grad=True)
    bias = torch.randn(ROWS, generator=g, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, V, (rows,), generator=g)
    targets[::5] = IGNORE_INDEX
    return hidden, weight, bias, targets


def _loss_and_grads(return_logits, smoothing=0.0, **kw):
    hidden, weight, bias, targets = _inputs(**kw)
    loss, logits = vocab_cross_entropy(hidden, weight, bias, targets, V, label_smoothing=smoothing,
                                       return_logits=return_logits)
    loss.backward()
    return loss.detach(), logits, (hidden.grad, weight.grad, bias.grad)


def test_shift_left_scores_each_position_on_the_next_label():
    labels = torch.tensor([[5, 6, 7, 8], [1, 2, IGNORE_INDEX, 4]])
    assert shift_left(labels).tolist() == [[6, 7, 8, IGNORE_INDEX], [2, IGNORE_INDEX, 4, IGNORE_INDEX]]


def test_chunk_rows_fill_tiles_and_never_reach_zero():
    assert lm_loss.chunk_rows(50_304) == 640                    # 2^25 / 50,304 = 667 -> 10 tiles of 64
    assert lm_loss.chunk_rows(151_936) == 192
    assert lm_loss.chunk_rows(2 ** 30) == 1


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_chunked_loss_and_gradients_equal_the_whole_computation(smoothing):
    whole, logits, grads = _loss_and_grads(True, smoothing)
    chunked, none, chunk_grads = _loss_and_grads(False, smoothing)
    assert none is None and logits.shape == (90, V)  # the padded columns are not returned
    # The reference: cross-entropy over the real vocabulary, mean over the scored rows (PyTorch's own).
    hidden, weight, bias, targets = _inputs()
    expected = F.cross_entropy(F.linear(hidden, weight, bias)[:, :V], targets, ignore_index=IGNORE_INDEX,
                               label_smoothing=smoothing)
    torch.testing.assert_close(whole, expected.detach())
    torch.testing.assert_close(chunked, whole)
    for got, want in zip(chunk_grads, grads):
        torch.testing.assert_close(got, want)
    # Padded rows take part in nothing: no gradient reaches them.
    assert not chunk_grads[1][V:].any() and not chunk_grads[2][V:].any()


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("return_logits", [True, False])
def test_nothing_to_predict_is_a_zero_loss_with_a_graph(return_logits):
    hidden, weight, bias, targets = _inputs()
    loss, _ = vocab_cross_entropy(hidden, weight, bias, torch.full_like(targets, IGNORE_INDEX), V,
                                  return_logits=return_logits)
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.isfinite(weight.grad).all() and not weight.grad.any()
    # No rows at all (an MLM batch with no masked position) too.
    empty = hidden[:0].detach().requires_grad_()
    loss, _ = vocab_cross_entropy(empty, weight, bias, targets[:0], V, return_logits=return_logits)
    assert loss.item() == 0.0 and loss.requires_grad


def saved_bytes(fn, inputs) -> int:
    """Bytes of the distinct tensors autograd keeps for the backward while ``fn()`` runs, beyond the
    ``inputs`` (which exist anyway; a chunk is a view of them)."""
    given = {t.untyped_storage().data_ptr() for t in inputs}
    kept: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in given:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(kept.values())


@pytest.mark.usefixtures("small_chunks")
def test_chunked_loss_keeps_no_logits_for_the_backward():
    inputs = hidden, weight, bias, targets = _inputs(rows=2000)
    logits_bytes = 2000 * V * 4  # the real vocabulary's logits in float32
    whole = saved_bytes(lambda: vocab_cross_entropy(hidden, weight, bias, targets, V, return_logits=True), inputs)
    chunked = saved_bytes(lambda: vocab_cross_entropy(hidden, weight, bias, targets, V, return_logits=False),
                          inputs)
    last_chunk_bytes = (2000 % lm_loss.chunk_rows(ROWS) or lm_loss.chunk_rows(ROWS)) * V * 4
    assert whole >= logits_bytes          # the whole form keeps its log-softmax for the backward
    # the chunked form keeps its inputs, scalars and the last chunk's log-softmax (that chunk is not
    # recomputed: see the next test), never the whole logits
    assert chunked <= last_chunk_bytes + 1024 < logits_bytes / 100


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("rows, chunks", [(90, 13), (7, 1), (3, 1)])
def test_only_the_chunks_before_the_last_are_recomputed(monkeypatch, rows, chunks):
    # Checkpointing the last chunk saves nothing at the peak (the backward starts with it, while the
    # model's activations are all alive) and costs its projection again; a batch whose logits fit one
    # chunk (the CPU's, BERT's masked rows) must project once.
    calls = []
    projected = lm_loss._projected_loss
    monkeypatch.setattr(lm_loss, "_projected_loss", lambda *a: calls.append(1) or projected(*a))
    hidden, weight, bias, targets = _inputs(rows=rows)
    loss, _ = vocab_cross_entropy(hidden, weight, bias, targets, V, return_logits=False)
    assert len(calls) == chunks
    loss.backward()
    assert len(calls) == chunks + (chunks - 1)


# ------------------------------------------------------------------------------------- the models
def _lm(backbone, **kw):
    sizes = dict(vocab_size=V, n_layers=2, d_model=D, n_heads=2, head_dim=8, d_ff=32, max_position=24,
                 type_vocab_size=0, dropout=0.0, attention_dropout=0.0)
    head = {"bert": "mlm", "gpt2": "causal_lm", "qwen": "causal_lm", "transformer": "seq2seq"}[backbone]
    extra = {"transformer": {"n_decoder_layers": 2}, "qwen": {"attention": "standard"},
             "bert": {"type_vocab_size": 2}}.get(backbone, {})
    torch.manual_seed(0)
    return build_model(ModelConfig(backbone=backbone, **{**sizes, **extra, **kw}), head).train()


def _lm_batch(backbone):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, V, (3, 11), generator=g)
    if backbone == "bert":
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, ::3] = ids[:, ::3]
        return dict(input_ids=ids, labels=labels)
    if backbone == "transformer":
        target = torch.randint(5, V, (3, 9), generator=g)
        labels = target.clone()
        labels[2, 6:] = IGNORE_INDEX
        return dict(input_ids=ids, decoder_input_ids=target, labels=labels)
    labels = ids.clone()
    labels[1, 4] = IGNORE_INDEX
    return dict(input_ids=ids, labels=labels)


def _step(model, batch, **kw):
    model.zero_grad(set_to_none=True)
    out = model(**batch, **kw)
    out["loss"].backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("backbone", ["bert", "gpt2", "qwen", "transformer"])
def test_every_lm_head_trains_on_the_chunked_loss_with_the_same_gradients(backbone):
    model = _lm(backbone)
    batch = _lm_batch(backbone)
    whole, grads = _step(model, batch)
    chunked, chunk_grads = _step(model, batch, return_logits=False)
    assert chunked["logits"] is None
    torch.testing.assert_close(chunked["loss"], whole["loss"])
    assert chunk_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(chunk_grads[name], grad, msg=name)
    # The whole form is the loss the heads always computed: from its (real-vocabulary) logits.
    logits = whole["logits"]
    assert logits.size(-1) == V
    labels = batch["labels"]
    if backbone in ("gpt2", "qwen"):
        expected = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
    elif backbone == "bert":
        expected = F.cross_entropy(logits, labels[labels != IGNORE_INDEX])
    else:
        expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=0.1)
    torch.testing.assert_close(whole["loss"], expected)


@pytest.mark.parametrize("backbone", ["gpt2", "qwen"])
def test_causal_lm_with_nothing_to_predict_has_a_zero_loss(backbone):
    model = _lm(backbone)
    ids = torch.randint(5, V, (2, 1))  # one-token rows: no next token anywhere
    for return_logits in (True, False):
        loss = model(input_ids=ids, labels=ids, return_logits=return_logits)["loss"]
        assert loss.item() == 0.0 and loss.requires_grad


def test_the_engine_trains_on_the_loss_alone_and_evaluates_with_logits():
    from leanlm.training.engine import TrainConfig, Trainer

    model = _lm("gpt2")
    calls = []
    model.register_forward_pre_hook(lambda m, args, kwargs: calls.append((m.training, kwargs.get("return_logits"))),
                                    with_kwargs=True)

    def evaluate(m):
        return {"logits_shape": list(m(**_lm_batch("gpt2"))["logits"].shape)}

    batch_at = lambda step, micro: _lm_batch("gpt2")  # noqa: E731
    config = TrainConfig(total_steps=2, lr=1e-3, grad_accum=2, progress=False, prefetch=0)
    summary = Trainer(model, config, batch_at, None, evaluate=evaluate).fit()
    assert calls[:4] == [(True, False)] * 4  # 2 steps x 2 micro-batches, logits never asked for
    assert calls[4:] == [(False, None)]       # the evaluation calls the model as a person would
    assert summary["history"][-1]["eval"] == {"logits_shape": [3, 11, V]}
