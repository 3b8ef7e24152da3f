"""leanlm's BERT MLM model and standard Qwen decoder against their ``transformers`` twins
(leanlm.modeling.hf_twins): same weights, same batches, dropout 0, fp32 on the CPU -> the same losses, at
initialisation and through training steps of the engine; what has no twin is refused by name. The GPU
check trains the same pairs under bf16 on the device (docs/gpu-check.md, section 4)."""

import pytest
import torch

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_twins import bert_twin, qwen2_twin
from leanlm.modeling.models import build_model
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.stages.packed_batches import CausalLMBatches, MLMBatches

VOCAB = 300
BERT = dict(vocab_size=VOCAB, n_layers=2, d_model=64, n_heads=2, head_dim=32, d_ff=128, max_position=64,
            dropout=0.0, attention_dropout=0.0)
QWEN = dict(backbone="qwen", vocab_size=VOCAB, n_layers=2, d_model=64, n_heads=4, head_dim=16, d_ff=96,
            max_position=64, type_vocab_size=0, dropout=0.0, attention_dropout=0.0, attention="standard",
            layer_norm_eps=1e-5, rope_theta=1e6)  # not Qwen2Config's defaults: the mapping must carry them


def _rows(n=24, length=32):
    rows = torch.randint(5, VOCAB, (n, length), generator=torch.Generator().manual_seed(3))
    rows[:, 0], rows[:, -1] = 2, 3
    return rows


def _losses(model, batches, steps=3):
    config = TrainConfig(total_steps=steps, lr=1e-3, warmup_steps=0, weight_decay=0.01, precision="fp32",
                         log_every=steps, progress=False, prefetch=0, seed=0)
    trainer = Trainer(model, config, batches, None)
    trainer.fit()
    return trainer.state.losses[:steps].tolist()


def _pair(config, head):
    torch.manual_seed(0)
    ours = build_model(config, head)
    torch.manual_seed(0)
    again = build_model(config, head)
    return ours, again


def test_bert_twin_computes_leanlms_losses():
    ours, again = _pair(ModelConfig(**BERT), "mlm")
    twin = bert_twin(again)
    batches = MLMBatches(_rows(), [0, 1, 2, 3, 4], 4, VOCAB, 4, 1, 0.15, seed=0)
    first = batches(0, 0)
    torch.testing.assert_close(twin(**first)["loss"], ours(**first)["loss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(_losses(twin, batches)), torch.tensor(_losses(ours, batches)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fields", [{"tie_word_embeddings": False}, {"tie_word_embeddings": True, "n_kv_heads": 2}],
                         ids=["untied", "tied-gqa"])
def test_qwen2_twin_computes_leanlms_losses(fields):
    ours, again = _pair(ModelConfig(**QWEN, **fields), "causal_lm")
    twin = qwen2_twin(again)
    batches = CausalLMBatches(_rows(), 4, 1, seed=0)
    first = batches(0, 0)
    torch.testing.assert_close(twin(**first)["loss"], ours(**first)["loss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(_losses(twin, batches)), torch.tensor(_losses(ours, batches)),
                               rtol=1e-5, atol=1e-6)


def test_what_has_no_twin_is_refused_by_name():
    with pytest.raises(ConfigError, match="'mhe_mul' cannot be exported"):
        bert_twin(build_model(ModelConfig(**{**BERT, "attention": "mhe_mul"}), "mlm"))
    with pytest.raises(ConfigError, match="attention='approximate'; only a standard model"):
        qwen2_twin(build_model(ModelConfig(**{**QWEN, "attention": "approximate"}), "causal_lm"))
    with pytest.raises(ConfigError, match="qk_norm"):
        qwen2_twin(build_model(ModelConfig(**QWEN, qk_norm=True), "causal_lm"))
    with pytest.raises(ConfigError, match="no residual dropout"):
        qwen2_twin(build_model(ModelConfig(**{**QWEN, "dropout": 0.1}), "causal_lm"))
    with pytest.raises(ConfigError, match="a BERT MLM model is needed"):
        bert_twin(build_model(ModelConfig(**BERT), "classification", num_labels=2))
