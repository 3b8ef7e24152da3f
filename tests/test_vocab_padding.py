"""Vocabulary tables padded to a multiple of 64 (ModelConfig.pad_vocab_to, issue 23): the tables have
the padded rows, nothing else sees them -- no parameter count, no logits, no loss, softmax or argmax --
and checkpoints written before the option load as they were."""

from __future__ import annotations

import json

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.checkpoint import CONFIG_NAME, load_model, save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import embedding_parameters, total_parameters
from leanlm.modeling.models import build_model
from leanlm.modeling.vocab import padding_parameters

V, D = 37, 16  # 37 real rows, 64 with the default padding

SIZES = dict(vocab_size=V, n_layers=2, d_model=D, n_heads=2, head_dim=8, d_ff=32, max_position=24,
             dropout=0.0, attention_dropout=0.0)
# (backbone, head, extra fields): every model with a vocabulary table, tied and untied.
MODELS = [
    ("bert", "mlm", {}),
    ("bert", "classification", {}),
    ("bert", "shuffle_random", {}),
    ("gpt2", "causal_lm", {"type_vocab_size": 0}),
    ("gpt2", "causal_lm", {"type_vocab_size": 0, "tie_word_embeddings": False}),
    ("qwen", "causal_lm", {"type_vocab_size": 0, "attention": "standard", "tie_word_embeddings": False}),
    ("qwen", "causal_lm", {"type_vocab_size": 0, "attention": "approximate", "layout": "hybrid"}),
    ("transformer", "seq2seq", {"type_vocab_size": 0, "n_decoder_layers": 2}),
    ("transformer", "seq2seq", {"type_vocab_size": 0, "n_decoder_layers": 2, "tie_word_embeddings": False}),
]
IDS = [f"{b}-{h}-{'-'.join(f'{k}={v}' for k, v in e.items() if k != 'type_vocab_size')}" for b, h, e in MODELS]


def _build(backbone, head, extra, **kw):
    config = ModelConfig(backbone=backbone, **{**SIZES, **extra, **kw})
    torch.manual_seed(0)
    kwargs = {"num_labels": 3} if head == "classification" else {}
    return build_model(config, head, **kwargs)


def _batch(backbone, head):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(5, V, (2, 9), generator=g)
    if head == "classification":
        return dict(input_ids=ids, labels=torch.tensor([0, 2]))
    if head == "shuffle_random":
        return dict(input_ids=ids, labels=torch.randint(0, 3, ids.shape, generator=g))
    if head == "seq2seq":
        return dict(input_ids=ids, decoder_input_ids=ids[:, :6], labels=ids[:, 1:7])
    return dict(input_ids=ids, labels=ids)


def test_vocab_rows_round_up_and_the_option_is_checked():
    config = ModelConfig(backbone="bert", **SIZES)
    assert (config.pad_vocab_to, config.vocab_rows) == (64, 64)
    assert config.replace(vocab_size=64).vocab_rows == 64
    assert config.replace(vocab_size=30_522).vocab_rows == 30_528      # BERT's WordPiece
    assert config.replace(vocab_size=50_265).vocab_rows == 50_304      # RoBERTa's BPE
    assert config.replace(pad_vocab_to=1).vocab_rows == V
    with pytest.raises(ConfigError, match="pad_vocab_to=0 must be a positive integer"):
        config.replace(pad_vocab_to=0)


@pytest.mark.parametrize("backbone,head,extra", MODELS, ids=IDS)
def test_padded_rows_exist_but_never_count(backbone, head, extra):
    padded = _build(backbone, head, extra)
    plain = _build(backbone, head, extra, pad_vocab_to=1)
    matrices = [p for p in padded.parameters() if p.ndim == 2 and p.shape[0] == 64]
    biases = [p for p in padded.parameters() if p.ndim == 1 and p.shape[0] == 64]  # the MLM head's
    assert matrices, "no vocabulary table was padded"
    assert len(matrices) == (1 if extra.get("tie_word_embeddings", True) else 2)  # tied: one table
    # Every count the tables print is the unpadded model's.
    assert total_parameters(padded) == total_parameters(plain)
    assert embedding_parameters(padded) == embedding_parameters(plain)
    stored = sum(p.numel() for p in padded.parameters())
    assert stored - total_parameters(padded) == padding_parameters(padded) == (64 - V) * (
        D * len(matrices) + len(biases))
    if backbone == "bert":
        words = padded.encoder.embeddings.word_embeddings
        assert words.embedding_parameter_count() == V * D  # Appendix 2.8's #Emb: |V| x d


@pytest.mark.parametrize("backbone,head,extra", MODELS, ids=IDS)
def test_padded_model_computes_the_unpadded_function(backbone, head, extra):
    """The unpadded model's weights in the padded one (the padded rows are filled in on load): same
    logits, loss and gradients; and large padded rows change nothing, so their logits are in no
    softmax, loss or argmax."""
    plain = _build(backbone, head, extra, pad_vocab_to=1).train()
    padded = _build(backbone, head, extra).train()
    padded.load_state_dict(plain.state_dict())
    with torch.no_grad():  # rows no real logit can beat, if they were ever read
        for p in padded.parameters():
            if p.shape[0] == 64:
                p[V:] = 1e4
    batch = _batch(backbone, head)
    outputs, grads = [], []
    for model in (plain, padded):
        model.zero_grad(set_to_none=True)
        out = model(**batch)
        out["loss"].backward()
        outputs.append(out)
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(outputs[1]["logits"], outputs[0]["logits"])
    torch.testing.assert_close(outputs[1]["loss"], outputs[0]["loss"])
    for name, grad in grads[0].items():
        got = grads[1][name]
        if got.shape != grad.shape:  # a vocabulary table: the real rows agree, the padded ones get nothing
            torch.testing.assert_close(got[:V], grad)
            assert not got[V:].any(), name
        else:
            torch.testing.assert_close(got, grad)


def test_translation_decodes_over_the_real_vocabulary_only():
    model = _build("transformer", "seq2seq", {"type_vocab_size": 0, "n_decoder_layers": 2}).eval()
    with torch.no_grad():
        model.embed_tokens.weight[V:] = 1e4
        out = model.generate(torch.randint(5, V, (2, 7)), max_length=6, beam_size=2)
    assert int(out.max()) < V


def test_checkpoints_record_the_padding_and_older_ones_load_unpadded(tmp_path):
    model = _build("bert", "mlm", {}).eval()
    save_checkpoint(model, model.config, tmp_path / "new")
    meta = json.loads((tmp_path / "new" / CONFIG_NAME).read_text())
    assert meta["model"]["pad_vocab_to"] == 64
    assert load_model(tmp_path / "new").decoder.weight.shape[0] == 64

    # A checkpoint written before the option: unpadded tables, no pad_vocab_to in its config.
    old = _build("bert", "mlm", {}, pad_vocab_to=1).eval()
    save_checkpoint(old, old.config, tmp_path / "old")
    meta = json.loads((tmp_path / "old" / CONFIG_NAME).read_text())
    del meta["model"]["pad_vocab_to"]
    (tmp_path / "old" / CONFIG_NAME).write_text(json.dumps(meta))
    loaded = load_model(tmp_path / "old").eval()
    assert loaded.config.pad_vocab_to == 1 and loaded.decoder.weight.shape[0] == V
    ids = torch.randint(5, V, (2, 9))
    torch.testing.assert_close(loaded(ids)["logits"], old(ids)["logits"], atol=0, rtol=0)
    # ... and fine-tuning from it builds the same unpadded backbone.
    classifier = load_model(tmp_path / "old", kind="classification", num_labels=2)
    assert classifier.encoder.embeddings.word_embeddings.weight.shape[0] == V
