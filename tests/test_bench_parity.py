"""``leanlm bench --parity``: each backbone against its ``transformers`` twin, the same function (losses
equal on a batch), timed interleaved in one process, peak memory in processes of their own. The report's
fields are checked at a tiny size; the timings themselves are measured, never asserted
(docs/benchmarks.md has them)."""

import pytest
import torch

from leanlm.benchmarks import parity
from leanlm.cli import main
from leanlm.errors import ConfigError

TINY = {"decoder": dict(n_layers=1, d_model=32, n_heads=2, n_kv_heads=2, head_dim=16, d_ff=64, vocab_size=128),
        "bert": dict(n_layers=1, d_model=32, n_heads=2, head_dim=16, d_ff=64, vocab_size=128)}


@pytest.mark.parametrize("pair", parity.PAIRS)
def test_the_twin_is_the_same_function(pair):
    """With dropout off, ours and the twin give the same loss and the same gradients of the shared
    weights (the twin's MLM head at the masked rows only, as ours)."""
    built = parity.build_pair(pair, batch_size=2, seq_len=16, overrides={**TINY[pair], "dropout": 0.0,
                                                                        "attention_dropout": 0.0})
    ours, twin = built["models"]
    loss_ours, loss_twin = parity.check_same_function(built)
    assert loss_ours == pytest.approx(loss_twin, rel=1e-5)
    for model, loss in zip(built["models"], built["losses"]):
        model.zero_grad()
        loss(built["batch"]).backward()
    if pair == "decoder":
        pairs = [(ours.model.layers[0].self_attn.q_proj.weight, twin.hf.model.layers[0].self_attn.q_proj.weight),
                 (ours.lm_head.weight, twin.hf.lm_head.weight)]
    else:
        pairs = [(ours.encoder.layers[0].attention.query.weight,
                  twin.hf.bert.encoder.layer[0].attention.self.query.weight),
                 (ours.transform.dense.weight, twin.hf.cls.predictions.transform.dense.weight)]
    for a, b in pairs:
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)
    if pair == "bert":  # the twin scored the masked rows only: its decoder saw as many rows as ours
        assert built["batch"]["masked_positions"].numel() < 2 * 16


def test_a_different_twin_is_refused():
    built = parity.build_pair("decoder", batch_size=2, seq_len=16, overrides=TINY["decoder"])
    with torch.no_grad():
        built["models"][1].hf.lm_head.weight.mul_(2)
    with pytest.raises(ConfigError, match="not the same model"):
        parity.check_same_function(built)


def test_report_fields_and_memory_on_cpu():
    report = parity.run_parity("decoder", steps=2, warmup=1, device="cpu", batch_size=2, seq_len=16,
                               overrides=TINY["decoder"])
    r = report["pairs"]["decoder"]
    assert len(r["seconds_ours"]) == len(r["seconds_twin"]) == 2
    assert r["tokens_per_s_ours"] > 0 and r["tokens_per_s_twin"] > 0
    assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
    assert r["peak_memory_ours"] > 0 and r["peak_memory_twin"] > 0  # measured in processes of their own
    assert report["clock"].startswith("process CPU seconds") and len(report["load_before"]) == 3
    assert "decoder" in parity.format_parity(report)


def test_parity_command_refuses_what_it_cannot_compare(capsys):
    assert main(["bench", "--parity", "decoder", "--seq-len", "4096", "--device", "cpu", "--no-memory"]) == 2
    assert "seq_len=4096 exceeds" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown pair"):
        parity.run_parity("gpt2")
    with pytest.raises(ConfigError, match="only a standard model is a Qwen2"):
        parity.build_pair("decoder", batch_size=1, seq_len=8, overrides={**TINY["decoder"], "attention": "mlp"})
