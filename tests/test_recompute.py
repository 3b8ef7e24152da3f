"""Activation checkpointing per block (issue 23, GPU first contact): for every model the matrix trains,
the same loss and gradients with and without it (dropout on: the recomputation must draw the same
masks), through the training engine too, and fewer bytes kept for the backward (counted with
``saved_tensors_hooks``, never timed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.modeling.recompute import set_activation_checkpointing
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.precision import training_autocast

from model_cases import batch_for, build, distinct_models, use_small_chunks  # noqa: E402  (tests/ is on sys.path)

CASES = distinct_models()
CPU = torch.device("cpu")


@pytest.fixture
def small_chunks(monkeypatch):
    use_small_chunks(monkeypatch)


def _step(model, batch, precision):
    """Loss and gradients of one training step, dropout drawn from a fixed seed."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    with training_autocast(precision, CPU):
        loss = model(**batch)["loss"]
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_cases_include_every_backbone_the_approximate_mixer_and_hash_embeddings():
    fields = [f for f, _ in CASES.values()]
    assert {"bert", "gpt2", "transformer", "qwen"} <= {f["backbone"] for f in fields}
    assert any(f["attention"] == "approximate" for f in fields)  # its own autograd Function
    assert any(f.get("embedding", "standard").startswith("hash_") for f in fields)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_checkpointed_blocks_give_the_same_loss_and_gradients(case, precision):
    fields, head = CASES[case]
    model = build(fields, head, dropout=0.1)
    batch = batch_for(model, head)
    loss, grads = _step(model, batch, precision)
    set_activation_checkpointing(model)
    again, regrads = _step(model, batch, precision)
    torch.testing.assert_close(again, loss)
    assert regrads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(regrads[name], grad, msg=name)


def _saved_bytes(model, batch) -> int:
    """Bytes of the distinct tensors the forward keeps for the backward, parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**batch)["loss"].backward()
    return sum(kept.values())


DEEP = dict(vocab_size=96, n_layers=6, d_model=32, n_heads=4, head_dim=8, d_ff=128, max_position=64,
            dropout=0.1, attention_dropout=0.1)


@pytest.mark.parametrize("backbone,head,extra", [
    ("bert", "mlm", {}),
    ("bert", "shuffle_random", {"embedding": "hash_pool", "embedding_options": {"bits": 16, "k": 4}}),
    ("gpt2", "causal_lm", {"type_vocab_size": 0}),
    ("qwen", "causal_lm", {"type_vocab_size": 0, "attention": "standard"}),
    ("qwen", "causal_lm", {"type_vocab_size": 0, "attention": "approximate", "layout": "hybrid"}),
    ("transformer", "seq2seq", {"type_vocab_size": 0, "n_decoder_layers": 6}),
], ids=["bert", "bert-hash_pool", "gpt2", "qwen", "qwen-approximate-hybrid", "encoder-decoder"])
def test_checkpointing_keeps_a_fraction_of_the_activations(backbone, head, extra):
    """Six blocks, 48 tokens: without checkpointing each block keeps a dozen tensors of the batch's
    size or larger (norm and projection inputs, the 4x-wide feed-forward hidden, attention's heads and
    dropout masks); with it, its input alone. What lies outside the blocks (embeddings, head, loss)
    is kept either way, and is small beside six blocks: the total falls below a third."""
    model = build_model(ModelConfig(backbone=backbone, **{**DEEP, **extra}), head).train()
    batch = _deep_batch(model, head)
    plain = _saved_bytes(model, batch)
    set_activation_checkpointing(model)
    checkpointed = _saved_bytes(model, batch)
    assert checkpointed < plain / 3, (checkpointed, plain)


def _deep_batch(model, head):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 96, (2, 24), generator=g)
    if head == "shuffle_random":
        from collections import Counter

        from leanlm.hashing import HashCodebook
        from leanlm.modeling.hash_features import embedding_features

        words = [f"w{i}" for i in range(40)]
        book = HashCodebook.for_model(model.config, Counter(words))
        rows = book.encode([" ".join(words[:30]), " ".join(words[10:40])], max_len=24, add_special_tokens=True)
        ids = torch.tensor(rows)
        features = book.features(ids, embedding_features(model.config), model.config.embedding_options)
        return dict(input_ids=ids, labels=torch.randint(0, 3, ids.shape, generator=g), **features)
    if head == "seq2seq":
        return dict(input_ids=ids, decoder_input_ids=ids[:, :20], labels=ids[:, 1:21])
    return dict(input_ids=ids, labels=ids)


def test_the_engine_trains_the_same_weights_with_checkpointing():
    """Two optimizer steps of two micro-batches each through the Trainer, dropout on: the weights
    come out the same with ``activation_checkpointing`` as without."""
    fields, head = next((f, h) for f, h in CASES.values() if f["backbone"] == "gpt2")
    trained = []
    for checkpointing in (False, True):
        model = build(fields, head, dropout=0.1)
        batch = batch_for(model, head)
        config = TrainConfig(total_steps=2, lr=1e-3, grad_accum=2, progress=False, prefetch=0,
                             activation_checkpointing=checkpointing)
        Trainer(model, config, lambda step, micro: batch, None).fit()
        trained.append(model.state_dict())
    for name, value in trained[0].items():
        torch.testing.assert_close(trained[1][name], value, msg=name)


def test_a_model_without_blocks_is_refused_by_name():
    with pytest.raises(ConfigError, match="Linear has no stack of transformer blocks"):
        set_activation_checkpointing(nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="activation_checkpointing=1 must be true or false"):
        TrainConfig(total_steps=1, lr=1e-3, activation_checkpointing=1)
