"""A variant takes its own options: a setting it does not declare is an error naming the variant and the key,
raised when the model config is validated (ModelConfig, hence ``leanlm validate``), before any job runs."""

from __future__ import annotations

import pytest

from leanlm.errors import ConfigError
from leanlm.modeling import ModelConfig, build_model


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
