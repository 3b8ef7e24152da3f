"""Checkpoints: round trips, corrupt/missing files, MLM -> classifier (the Hugging Face export:
test_export_hf.py, test_export_hf_roundtrip.py)."""

from __future__ import annotations

import json
import pytest
import torch

from leanlm.errors import ConfigError, TrainingError
from leanlm.modeling.checkpoint import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    load_model,
    read_checkpoint_meta,
    save_checkpoint,
)
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.heads import BertForMLM, BertForSequenceClassification

TINY = dict(vocab_size=120, n_layers=2, d_model=32, n_heads=4, head_dim=8, d_ff=64,
            max_position=40, type_vocab_size=2)


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 9:] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return ids, mask, types


def trained_like(model):
    # Move every weight off its init (biases, LayerNorm) so a round trip that dropped any shows.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


@pytest.mark.parametrize("attention", ["mha", "mhe_mul", "sha"])
def test_mlm_round_trip_gives_identical_logits(tmp_path, attention):
    torch.manual_seed(0)
    config = ModelConfig(**TINY, attention=attention)
    model = trained_like(BertForMLM(config))
    save_checkpoint(model, config, tmp_path / "ckpt", extra={"step": 7})
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [CONFIG_NAME, WEIGHTS_NAME]
    loaded = load_model(tmp_path / "ckpt").eval()
    ids, mask, types = batch()
    torch.testing.assert_close(loaded(ids, mask, types)["logits"], model(ids, mask, types)["logits"],
                               atol=0, rtol=0)
    # Tied weights come back tied, not as two copies.
    assert loaded.decoder.weight is loaded.encoder.embeddings.word_embeddings.weight
    meta = read_checkpoint_meta(tmp_path / "ckpt")
    assert meta["extra"] == {"step": 7} and meta["model"]["attention"] == attention
    assert meta["tied"] == {"decoder.weight": "encoder.embeddings.word_embeddings.weight"}


def test_classifier_round_trip_and_start_from_mlm(tmp_path):
    torch.manual_seed(1)
    config = ModelConfig(**TINY, attention="mhe_add")
    clf = trained_like(BertForSequenceClassification(config, num_labels=3))
    save_checkpoint(clf, config, tmp_path / "clf")
    loaded = load_model(tmp_path / "clf", kind="classification").eval()
    assert loaded.num_labels == 3
    ids, mask, types = batch(1)
    torch.testing.assert_close(loaded(ids, mask, types)["logits"], clf(ids, mask, types)["logits"],
                               atol=0, rtol=0)
    with pytest.raises(TrainingError, match="holds a classification model"):
        load_model(tmp_path / "clf", kind="mlm")

    # An MLM checkpoint loads as a regression model: encoder weights copied, pooler fresh.
    mlm = trained_like(BertForMLM(config))
    save_checkpoint(mlm, config, tmp_path / "mlm")
    reg = load_model(tmp_path / "mlm", kind="classification", num_labels=1).eval()
    torch.testing.assert_close(reg.encoder.layers[1].attention.value_head_embeddings,
                               mlm.encoder.layers[1].attention.value_head_embeddings, atol=0, rtol=0)
    torch.testing.assert_close(reg.encoder(ids, mask)[0], mlm.encoder(ids, mask)[0], atol=0, rtol=0)
    out = reg(ids, mask, types, labels=torch.tensor([0.5, 1.0, -1.0]))
    assert out["logits"].shape == (3, 1) and out["loss"].item() > 0
    with pytest.raises(ConfigError, match="needs num_labels"):
        load_model(tmp_path / "mlm", kind="classification")


def test_pretrained_encoder_of_another_variant_is_refused(tmp_path):
    mlm_config = ModelConfig(**TINY, attention="mhe_mul")
    save_checkpoint(BertForMLM(mlm_config), mlm_config, tmp_path / "mlm")
    meta_path = tmp_path / "mlm" / CONFIG_NAME
    meta = json.loads(meta_path.read_text())
    meta["model"]["attention"] = "mha"  # weights of an MHE model, config claiming MHA
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(TrainingError, match="attention='mha'"):
        load_model(tmp_path / "mlm", kind="classification", num_labels=2)


def test_corrupt_or_missing_files_raise_training_error_naming_them(tmp_path):
    config = ModelConfig(**TINY)
    directory = tmp_path / "ckpt"
    save_checkpoint(BertForMLM(config), config, directory)
    weights = directory / WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: a killed copy
    with pytest.raises(TrainingError, match=f"{weights}.*corrupt"):
        load_model(directory)
    weights.unlink()
    with pytest.raises(TrainingError, match=f"{weights}.*missing"):
        load_model(directory)
    (directory / CONFIG_NAME).write_text("{not json")
    with pytest.raises(TrainingError, match=f"{directory / CONFIG_NAME}.*corrupt"):
        load_model(directory)
    (directory / CONFIG_NAME).unlink()
    with pytest.raises(TrainingError, match=f"{directory / CONFIG_NAME}.*missing"):
        load_model(directory)
