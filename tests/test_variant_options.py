"""A variant takes its own options: a setting it does not declare is an error naming the variant and the key,
raised when the model config is validated (ModelConfig, hence ``leanlm validate``), before any job runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from leanlm.errors import ConfigError
from leanlm.modeling import ModelConfig, build_model

ROOT = Path(__file__).resolve().parents[1]


def _config(**fields) -> ModelConfig:
    return ModelConfig.preset("tiny", **fields)


@pytest.mark.parametrize("backbone,attention", [("bert", "mha"), ("gpt2", "mha"), ("transformer", "mhe_mul"),
                                                ("bert", "fnet")])
def test_an_option_the_attention_does_not_take_is_an_error(backbone, attention):
    extra = {"type_vocab_size": 0, "n_decoder_layers": 2} if backbone == "transformer" else {}
    with pytest.raises(ConfigError, match=rf"attention {attention!r}.*n_kv_heads"):
        _config(backbone=backbone, attention=attention, n_kv_heads=2, **extra)


def test_an_option_no_mixer_of_the_model_takes_is_an_error():
    # a uniform MLP model has no attention layer at all: its key/value heads would be ignored
    with pytest.raises(ConfigError, match=r"'mlp'.*n_kv_heads"):
        _config(backbone="qwen", type_vocab_size=0, attention="mlp", layout="uniform", n_kv_heads=2)
    # a hybrid keeps standard layers, which take it
    _config(backbone="qwen", type_vocab_size=0, attention="mlp", layout="hybrid", n_kv_heads=2)


def test_gqa_groups_key_value_heads_in_ch3_backbones():
    for backbone in ("bert", "gpt2"):
        config = _config(backbone=backbone, attention="gqa", n_kv_heads=2)
        head = "mlm" if backbone == "bert" else "causal_lm"
        model = build_model(config, head)
        attention = next(m for name, m in model.named_modules() if name.endswith("layers.0.attention"))
        assert attention.key.out_features == attention.value.out_features == 2 * config.head_dim
        assert attention.query.out_features == config.n_heads * config.head_dim


def test_gqa_needs_kv_heads_dividing_the_heads():
    with pytest.raises(ConfigError, match=r"attention 'gqa'.*n_kv_heads=3.*n_heads=4"):
        _config(attention="gqa", n_kv_heads=3)
    with pytest.raises(ConfigError, match=r"attention 'gqa'.*n_kv_heads"):
        _config(attention="gqa")  # without n_kv_heads it would be plain MHA under another name


def test_an_embedding_option_it_does_not_take_is_an_error_at_validation():
    with pytest.raises(ConfigError, match=r"embedding_options \['bits'\].*embedding 'standard'"):
        _config(embedding_options={"bits": 64})
    with pytest.raises(ConfigError, match=r"embedding_options \['buckets'\].*embedding 'hash_pool'"):
        _config(embedding="hash_pool", embedding_options={"buckets": 8})


# ------------------------------------------------------------------ planning without torch (issue 25)
def test_what_planning_reads_from_a_variants_source_equals_the_imported_class():
    """runs.reads_fixed_text and hash_features.embedding_features read a mixer's qk_stream and an embedding's
    features from the sources (VariantRegistry.declared), through base classes: the same as importing."""
    from leanlm.modeling.variants import EMBEDDINGS, MIXERS

    for registry, attribute in ((MIXERS, "qk_stream"), (EMBEDDINGS, "features")):
        for name in registry.names():
            assert registry.declared(name, attribute) == getattr(registry.get(name), attribute), (name, attribute)
    with pytest.raises(ConfigError, match=r"sets no literal 'defaults'"):  # {**Base.defaults, ...}: not a literal
        EMBEDDINGS.declared("hash_emb", "defaults")


def test_a_passed_variant_check_is_remembered_until_a_model_source_changes_and_a_refusal_never(tmp_path,
                                                                                              monkeypatch):
    from leanlm import memo
    from leanlm.modeling import variants

    config = ModelConfig.preset("tiny", attention="gqa", n_kv_heads=2)
    other = ModelConfig.preset("tiny", attention="mha")
    monkeypatch.setattr(variants, "_PACKAGE_DIR", tmp_path)
    shutil.copytree(ROOT / "workflow" / "leanlm" / "modeling", tmp_path / "modeling",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "registry.py").write_text("# stands for leanlm/registry.py\n")
    monkeypatch.setattr(memo, "_OPEN", {})
    calls = []
    monkeypatch.setattr(variants, "_check_variants", lambda config, where: calls.append(where))
    variants.check_variants(config, "a")
    variants.check_variants(config, "b")
    assert calls == ["a"]                                      # remembered
    (tmp_path / "modeling" / "attention" / "gqa.py").write_text(
        (tmp_path / "modeling" / "attention" / "gqa.py").read_text() + "# edited\n")
    variants.check_variants(config, "c")
    assert calls == ["a", "c"]                                 # a model source changed: checked again
    memo.save_all()
    assert (tmp_path / "__pycache__" / "leanlm-variant-checks.json").is_file()

    def refuse(config, where):
        calls.append(where)
        raise ConfigError("refused")

    monkeypatch.setattr(variants, "_check_variants", refuse)
    for where in ("d", "e"):
        with pytest.raises(ConfigError):
            variants.check_variants(other, where)
    assert calls[-2:] == ["d", "e"]                            # a refusal is never remembered
