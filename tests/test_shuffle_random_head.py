"""Shuffle+Random's head: ours (BERT's transform + Linear(d, 3), the default) or the official HashFormers
code's (``RobertaForShuffleRandomThreeWayClassification``: dropout + Linear(d, 3)), picked by
``pretrain.shuffle_random.head`` (issue 27, the sources' own behaviour)."""

from __future__ import annotations

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.heads import MLMTransform
from leanlm.modeling.models import build_model
from leanlm.modeling.shuffle_random import N_CLASSES, SHUFFLE_RANDOM_HEADS
from test_ch2_pipeline import tiny_project  # noqa: F401  (the fixture: a tiny ch. 2 smoke project)

TINY = dict(vocab_size=200, n_layers=2, d_model=32, n_heads=4, head_dim=8, d_ff=64, max_position=40)
BERT_BASE = dict(vocab_size=50_265, n_layers=12, d_model=768, n_heads=12, head_dim=64, d_ff=3072, max_position=514)


def head_parameters(model) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if not name.startswith("encoder."))


def test_official_head_is_dropout_and_one_linear_layer():
    config = ModelConfig(**TINY, dropout=0.25)
    torch.manual_seed(0)
    model = build_model(config, "shuffle_random", head_type="official_code")
    assert not any(isinstance(m, MLMTransform) for m in model.modules())
    assert isinstance(model.transform, torch.nn.Dropout) and model.transform.p == 0.25  # hidden dropout
    assert head_parameters(model) == config.d_model * N_CLASSES + N_CLASSES
    ids = torch.randint(5, 200, (2, 12))
    sequence, _ = model.encoder.eval()(ids)
    model.eval()
    assert torch.allclose(model(input_ids=ids)["logits"], model.classifier(sequence))
    model.transform.train()  # the encoder stays in eval: any change comes from the head's dropout
    a, b = model(input_ids=ids)["logits"], model(input_ids=ids)["logits"]
    assert not torch.allclose(a, b)


def test_the_default_head_is_unchanged_and_592k_larger_at_bert_base():
    config = ModelConfig(**TINY)
    torch.manual_seed(0)
    default = build_model(config, "shuffle_random")
    torch.manual_seed(0)
    named = build_model(config, "shuffle_random", head_type="bert")
    assert isinstance(default.transform, MLMTransform)
    assert all(torch.equal(p, q) for p, q in zip(default.state_dict().values(), named.state_dict().values()))
    with torch.device("meta"):  # counts only: no 110M weights in memory
        ours = build_model(ModelConfig(**BERT_BASE), "shuffle_random")
        official = build_model(ModelConfig(**BERT_BASE), "shuffle_random", head_type="official_code")
    # The 592K: dense 768 x 768 + bias, LayerNorm's weight and bias.
    assert head_parameters(ours) - head_parameters(official) == 768 * 768 + 768 + 2 * 768 == 592_128
    assert head_parameters(official) == 768 * 3 + 3


def test_an_unknown_head_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"pretrain.shuffle_random.head='linear'.*bert.*official_code"):
        build_model(ModelConfig(**TINY), "shuffle_random", head_type="linear")
    assert SHUFFLE_RANDOM_HEADS == ("bert", "official_code")


def test_profile_may_pick_the_official_head(scratch_root):
    from leanlm.config import load_config
    from leanlm.objectives.shuffle_random import ShuffleRandomObjective
    from params_files import edit_yaml

    smoke = scratch_root / "params/smoke.yaml"
    settings = load_config("params/smoke.yaml")["pretrain"]["shuffle_random"]
    assert "head" not in settings and ShuffleRandomObjective().head_options(settings) == {}  # default kept
    edit_yaml(smoke, lambda d: d["pretrain"]["shuffle_random"].update(head="official_code"))
    settings = load_config("params/smoke.yaml")["pretrain"]["shuffle_random"]
    assert ShuffleRandomObjective().head_options(settings) == {"head_type": "official_code"}
    edit_yaml(smoke, lambda d: d["pretrain"]["shuffle_random"].update(head="linear"))
    with pytest.raises(ConfigError, match=r"smoke\.yaml(.|\n)*head"):
        load_config("params/smoke.yaml")


def test_pretraining_with_the_official_head_and_corruption(tiny_project, monkeypatch):
    """A hash run pretrains end to end under both official options: the built model has the official head
    (d^2 + 3d fewer parameters than ours) and its batches carry the official random bit vectors."""
    from leanlm.config import load_config
    from leanlm.hashing import official_replacements
    from leanlm.stages.pretrain import pretrain
    from params_files import edit_yaml

    run_id = "ch2_hashformers-md5_add"
    ours = pretrain(load_config("params/smoke.yaml"), run_id)["parameters"]["total"]
    edit_yaml(tiny_project / "params/smoke.yaml",
              lambda d: d["pretrain"]["shuffle_random"].update(head="official_code", corruption="official_code"))
    draws = []
    drawn = official_replacements.random_bit_vectors
    monkeypatch.setitem(official_replacements.OFFICIAL_RANDOM_INPUTS, "hash_add",
                        lambda n, t, g: draws.append(n) or drawn(n, t, g))
    record = pretrain(load_config("params/smoke.yaml"), run_id)
    d = record["model"]["d_model"]
    assert record["pretrain"]["head"] == "official_code"
    assert ours - record["parameters"]["total"] == d * d + 3 * d
    assert draws and sum(draws) > 0  # training and validation batches replaced tokens with bit vectors


@pytest.mark.parametrize("head_type", SHUFFLE_RANDOM_HEADS)
def test_a_saved_model_loads_back_with_its_own_head(tmp_path, head_type):
    # The checkpoint does not record the head; its weights say it (the official code's has no transform).
    from leanlm.modeling.checkpoint import load_model, save_checkpoint

    config = ModelConfig(**TINY)
    model = build_model(config, "shuffle_random", head_type=head_type)
    save_checkpoint(model, config, tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.head_type == head_type and type(loaded.transform) is type(model.transform)
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), loaded.state_dict().values()))
