"""Parameter counts: BERT/RoBERTa-base parity with transformers, Table 3.1's #params, Table 3.13's
per-block weights, and Table 3.4's closed forms against the instantiated modules."""

from __future__ import annotations

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.attention import ATTENTION, build_attention
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import (
    attention_block_memory,
    attention_formula,
    attention_parameters,
    embedding_parameters,
    model_attention_parameters,
    qkv_parameters,
    total_parameters,
)
from leanlm.modeling.encoder import BertEncoder
from leanlm.modeling.heads import BertForMLM, BertForSequenceClassification

BERT_BASE = dict(vocab_size=30522, n_layers=12, d_model=768, n_heads=12, head_dim=64, d_ff=3072,
                 max_position=512, type_vocab_size=2)


def on_meta(build):
    # Shapes are all counting needs; the meta device skips allocating ~110M floats.
    with torch.device("meta"):
        return build()


def test_bert_base_classifier_matches_transformers():
    from transformers import BertConfig
    from transformers import BertForSequenceClassification as HFBert

    ours = on_meta(lambda: BertForSequenceClassification(ModelConfig(**BERT_BASE), num_labels=2))
    hf = on_meta(lambda: HFBert(BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                           num_attention_heads=12, intermediate_size=3072,
                                           max_position_embeddings=512, type_vocab_size=2,
                                           num_labels=2)))
    assert total_parameters(ours) == hf.num_parameters() == 109_483_778


def test_roberta_base_classifier_matches_transformers():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    config = ModelConfig(**{**BERT_BASE, "vocab_size": 50265, "max_position": 514,
                            "type_vocab_size": 1, "pad_token_id": 1, "position_offset": 2})
    ours = on_meta(lambda: BertForSequenceClassification(config, num_labels=2))
    hf = on_meta(lambda: RobertaForSequenceClassification(RobertaConfig(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, num_labels=2)))
    assert total_parameters(ours) == hf.num_parameters() == 124_647_170


def test_mlm_ties_decoder_to_word_embeddings():
    from transformers import BertConfig, BertForMaskedLM

    model = on_meta(lambda: BertForMLM(ModelConfig(**BERT_BASE)))
    assert model.decoder.weight is model.encoder.embeddings.word_embeddings.weight
    # BertForMaskedLM's count: no pooler, decoder weight shared, decoder bias of vocab size.
    hf = on_meta(lambda: BertForMaskedLM(BertConfig()))
    assert total_parameters(model) == hf.num_parameters() == 109_514_298
    assert embedding_parameters(model) == (30522 + 512 + 2) * 768


# Table 3.1 (#params over 12 BERT-base blocks) and Table 3.13 (weights in bytes per block, 6 B each).
TABLE_3_1 = {"sha": (8_847_360, "8.85M"), "mha": (28_311_552, "28.31M"),
             "mhe_add": (8_875_008, "8.88M"), "mhe_mul": (8_875_008, "8.88M")}
TABLE_3_13_WEIGHTS = {"sha": 4_423_680, "mha": 14_155_776, "mhe_add": 4_437_504, "mhe_mul": 4_437_504}


@pytest.mark.parametrize("variant", sorted(TABLE_3_1))
def test_table_3_1_attention_parameters(variant):
    encoder = on_meta(lambda: BertEncoder(ModelConfig(**BERT_BASE, attention=variant)))
    count = model_attention_parameters(encoder)
    exact, printed = TABLE_3_1[variant]
    assert count == exact
    # The thesis prints MHA as 28.32M; 12 * 4 * 768^2 = 28,311,552 rounds to 28.31M (thesis rounding).
    assert f"{count / 1e6:.2f}M" == printed


@pytest.mark.parametrize("variant", sorted(TABLE_3_13_WEIGHTS))
def test_table_3_13_weights_per_block(variant):
    encoder = on_meta(lambda: BertEncoder(ModelConfig(**BERT_BASE, attention=variant)))
    per_block = {attention_parameters(layer.attention) for layer in encoder.layers}
    assert len(per_block) == 1
    memory = attention_block_memory(per_block.pop())
    assert memory["weights"] == TABLE_3_13_WEIGHTS[variant]
    # Totals as printed (fp16 mixed precision, batch 32 x 512 x 768 activations).
    printed_totals = {"sha": 39_911_424, "mha": 72_351_744, "mhe_add": 39_957_504,
                      "mhe_mul": 39_957_504}
    assert memory["total"] == printed_totals[variant]


def test_attention_counts_exclude_biases_only():
    mha = build_attention("mha", d_model=64, n_heads=4, head_dim=16)
    with_bias = sum(p.numel() for p in mha.parameters())
    assert attention_parameters(mha) == 4 * 64 * 64
    assert with_bias - attention_parameters(mha) == 4 * 64


@pytest.mark.parametrize("n,d", [(1, 8), (2, 16), (4, 8), (12, 64), (16, 4)])
@pytest.mark.parametrize("variant", ["sha", "mha", "mhe_add", "mhe_mul"])
def test_qkv_formula_matches_instantiated_module(variant, n, d):
    module = on_meta(lambda: build_attention(variant, d_model=n * d, n_heads=n, head_dim=d))
    assert type(module).qkv_parameter_formula(n, d) == qkv_parameters(module)


# Table 3.4's columns, typed from the thesis, checked against the variants' own formulas.
TABLE_3_4 = {
    "sha": (lambda n, d: 3 * d**2 * n, lambda n, d: 0),
    "mha": (lambda n, d: 3 * d**2 * n**2, lambda n, d: (3 * n**2 - 3 * n) * d**2),
    "mhe_add": (lambda n, d: 3 * d**2 * n + 3 * d * n, lambda n, d: 3 * n * d),
    "mhe_mul": (lambda n, d: 3 * d**2 * n + 3 * d * n, lambda n, d: 3 * n * d),
}


@pytest.mark.parametrize("variant", sorted(TABLE_3_4))
def test_attention_formula_is_table_3_4(variant):
    params, extra = TABLE_3_4[variant]
    for n, d in [(12, 64), (8, 64), (32, 128), (3, 5)]:
        row = attention_formula(variant, n, d)
        assert row["params"] == params(n, d)
        assert row["params_extra"] == extra(n, d)
    row = attention_formula(variant, 12, 64)
    assert row["complexity"] == (r"$\mathcal{O}(n^2)$" if variant == "mha" else r"$\mathcal{O}(n)$")
    assert row["latex"]["params"].startswith("$")


def test_every_registered_variant_brings_its_formula():
    for name in ATTENTION.names():
        row = attention_formula(name, 4, 8)
        # FNet mixes tokens by a Fourier transform: no parameters at all.
        assert (row["params"] > 0 or name == "fnet") and row["complexity"] and row["latex"]["params_extra"]


def test_config_round_trip_and_errors():
    config = ModelConfig(**BERT_BASE, attention="mhe_mul")
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match=r"params/x.yaml: unknown model key\(s\) \['n_head'\]"):
        ModelConfig.from_dict({**config.to_dict(), "n_head": 3}, where="params/x.yaml")
    with pytest.raises(ConfigError, match=r"missing model key\(s\) \['d_ff'\]"):
        ModelConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "d_ff"})
    with pytest.raises(ConfigError, match="attention='mhe_sub' is unknown"):
        ModelConfig.from_dict({**config.to_dict(), "attention": "mhe_sub"}, where="ch3.yaml")
    with pytest.raises(ConfigError, match="ch3.yaml: n_layers=0 must be a positive integer"):
        ModelConfig.from_dict({**config.to_dict(), "n_layers": 0}, where="ch3.yaml")


def test_bench_flops_per_token_and_cpu_run():
    from leanlm.benchmarks.pretraining import flops_per_token, format_report, peak_flops, run_bench

    base = on_meta(lambda: BertForMLM(ModelConfig(**BERT_BASE)))
    non_embedding = total_parameters(base) - (30522 + 512 + 2) * 768
    # 6N + 12 * layers * L * heads * d_h at L = 512.
    assert flops_per_token(base, 512) == 6 * non_embedding + 12 * 12 * 512 * 12 * 64
    sha = on_meta(lambda: BertForMLM(ModelConfig(**BERT_BASE, attention="sha")))
    sha_non_embedding = total_parameters(sha) - (30522 + 512 + 2) * 768
    assert flops_per_token(sha, 512) == 6 * sha_non_embedding + 12 * 12 * 512 * 1 * 64
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA L40S") == 362e12 and peak_flops("Tesla T4") is None

    result = run_bench("tiny", "mhe_mul", batch_size=2, seq_len=16, steps=2, device="cpu",
                       dtype="float32", warmup=1)
    assert result["mfu"] is None and result["tokens_per_s"] > 0 and result["step_ms"] > 0
    assert result["attention_params"] == 2 * (3 * 64 * 16 + 64 * 64 + 3 * 4 * 16)
    assert "tokens/s" in format_report(result)
    with pytest.raises(ConfigError, match="seq_len=200 exceeds"):
        run_bench("tiny", "mha", batch_size=1, seq_len=200, steps=1, device="cpu")
