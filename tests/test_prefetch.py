"""Batches built ahead in a background thread (leanlm.training.prefetch) and the loop's device syncs.

The prefetcher must change nothing but timing: the same batches, losses and weights, bit for bit on CPU,
with it on and off (a real MLM pretraining batch source with dropout in the model, grad_accum 2); an
error in building a batch must surface when that batch is due. The loop that reads losses back only at
log/eval/checkpoint boundaries (leanlm.training.loss_readback; on accelerators, forced here on CPU) must
still make no update with a non-finite loss. The packed batches and the heads must give the models
nothing that makes the host wait for the device: no all-ones attention_mask, the MLM's labelled
positions counted on the CPU.
"""

import pytest
import torch
from torch import nn

from leanlm.errors import TrainingError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.decoder import GPT2ForCausalLM
from leanlm.modeling.heads import BertForMLM, labelled_positions
from leanlm.training import loss_readback
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.prefetch import BatchPrefetcher
from leanlm.stages.packed_batches import CausalLMBatches, MLMBatches

torch.set_num_threads(1)

VOCAB, SEQ = 64, 16
SPECIAL = [0, 1, 2, 3, 4]  # pad, unk, cls, sep, mask


def packed_rows(n: int = 40) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7)
    rows = torch.randint(5, VOCAB, (n, SEQ), generator=gen)
    rows[:, 0], rows[:, -1] = 2, 3
    return rows


def tiny_config() -> ModelConfig:
    return ModelConfig(vocab_size=VOCAB, n_layers=2, d_model=16, n_heads=2, head_dim=8, d_ff=32,
                       max_position=SEQ, dropout=0.1, attention_dropout=0.1)


def mlm_batches() -> MLMBatches:
    return MLMBatches(packed_rows(), SPECIAL, mask_id=4, vocab_size=VOCAB, batch_size=4, grad_accum=2,
                      mask_prob=0.15, seed=0)


def train(prefetch: int, batch_at=None, steps: int = 12, run_dir=None, **overrides):
    torch.manual_seed(0)
    model = BertForMLM(tiny_config())
    cfg = TrainConfig(total_steps=steps, lr=1e-3, warmup_steps=2, grad_accum=2, log_every=3, progress=False,
                      prefetch=prefetch, **overrides)
    trainer = Trainer(model, cfg, batch_at or mlm_batches(), run_dir)
    summary = trainer.fit()
    return model, trainer, summary


def test_prefetch_on_and_off_train_bit_for_bit():
    off_model, off, off_summary = train(prefetch=0)
    for depth in (1, 3):
        on_model, on, on_summary = train(prefetch=depth)
        assert torch.equal(on.state.losses, off.state.losses)
        assert on_summary["history"] == off_summary["history"]
        assert on_summary["tokens"] == off_summary["tokens"] == 12 * 2 * 4 * SEQ
        for (name, a), b in zip(off_model.state_dict().items(), on_model.state_dict().values()):
            assert torch.equal(a, b), name


def test_prefetch_builds_in_order_and_raises_a_batch_error_when_it_is_due():
    calls = []

    def batch_at(step, micro):
        calls.append((step, micro))
        if step == 5:
            raise ValueError("row 17 of step 5 is bad")
        return {"x": torch.full((2,), float(step))}

    keys = [(s, m) for s in range(8) for m in range(2)]
    with BatchPrefetcher(batch_at, keys, depth=2) as prefetcher:
        for step in range(5):
            for micro in range(2):
                batch, tokens = prefetcher.get(step, micro)
                assert batch["x"][0] == step and tokens == 2
        with pytest.raises(ValueError, match="row 17 of step 5"):
            prefetcher.get(5, 0)
    assert calls == keys[: calls.index((5, 0)) + 1]  # built in the engine's order, nothing after the error
    with BatchPrefetcher(batch_at, keys, depth=1) as prefetcher, pytest.raises(RuntimeError, match=r"\(0, 0\)"):
        prefetcher.get(0, 1)  # the loop and the prefetcher disagree on the order: a clear error


def test_engine_error_in_a_batch_surfaces_at_its_step(tmp_path):
    inner = mlm_batches()
    started = []

    def dies_at_7(step, micro):
        if step == 7:
            raise KeyError("step 7")
        return inner(step, micro)

    torch.manual_seed(0)
    trainer = Trainer(BertForMLM(tiny_config()),
                      TrainConfig(total_steps=12, lr=1e-3, grad_accum=2, progress=False, prefetch=3),
                      dies_at_7, None, on_step_start=started.append)
    with pytest.raises(KeyError, match="step 7"):
        trainer.fit()
    assert started == list(range(8)) and trainer.state.step == 7  # steps 0-6 done, each marked once


@pytest.fixture
def deferred(monkeypatch):
    """The accelerator's loop on CPU: losses read at boundaries, the fused AdamW skipping bad steps."""
    monkeypatch.setattr(loss_readback, "defers_checks", lambda device: True)


def test_deferred_reads_record_the_same_run(deferred):
    deferred_model, deferred_trainer, deferred_summary = train(prefetch=2)
    assert deferred_trainer.deferred_checks and deferred_trainer.optimizer.defaults["fused"]
    assert deferred_trainer.readback.pending == []  # everything read back before fit returned
    # Fused and unfused AdamW round differently; the run is the same to float precision.
    readback_defers = loss_readback.defers_checks
    try:
        loss_readback.defers_checks = lambda device: False
        _, eager, eager_summary = train(prefetch=2)
    finally:
        loss_readback.defers_checks = readback_defers
    assert torch.allclose(deferred_trainer.state.losses, eager.state.losses, rtol=1e-5, atol=0)
    assert [r["step"] for r in deferred_summary["history"]] == [r["step"] for r in eager_summary["history"]]
    assert deferred_summary["tokens"] == eager_summary["tokens"]


def test_deferred_reads_make_no_update_from_a_nan_step(deferred, tmp_path):
    class NaNAtStep4(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = BertForMLM(tiny_config())
            self.calls = 0

        def forward(self, **batch):
            out = self.inner(**batch)
            self.calls += 1
            if self.calls in (9, 10):  # both micro-batches of step 4
                out = {**out, "loss": out["loss"] * float("nan")}
            return out

    torch.manual_seed(0)
    model, seen = NaNAtStep4(), {}

    def step_starts(step):
        if step == 4:
            seen["weights"] = {k: v.clone() for k, v in model.state_dict().items()}

    cfg = TrainConfig(total_steps=12, lr=1e-3, grad_accum=2, log_every=3, progress=False, prefetch=2)
    with pytest.raises(TrainingError) as err:
        Trainer(model, cfg, mlm_batches(), tmp_path / "run", on_step_start=step_starts).fit()
    message = str(err.value)
    # Read back after step 5 (log_every 3): step 4 is named, and step 5's update was skipped too.
    assert "at step 4" in message and "nan" in message and "so was the update of step 5" in message
    for name, value in model.state_dict().items():
        assert torch.equal(value, seen["weights"][name]), name  # still the weights after step 3


def test_packed_batches_carry_nothing_the_device_must_be_asked_about():
    mlm = mlm_batches()(0, 1)
    assert "attention_mask" not in mlm
    assert torch.equal(mlm["masked_positions"], labelled_positions(mlm["labels"]))
    assert mlm["masked_positions"].numel() == int((mlm["labels"] != -100).sum()) > 0
    causal = CausalLMBatches(packed_rows(), batch_size=4, grad_accum=1, seed=0)(2, 0)
    assert set(causal) == {"input_ids", "labels"}


def test_mlm_loss_from_positions_equals_the_boolean_selection():
    torch.manual_seed(0)
    model = BertForMLM(tiny_config()).eval()
    batch = mlm_batches()(3, 0)
    with torch.no_grad():
        given = model(**batch)
        selected = model(batch["input_ids"], labels=batch["labels"])
        masked_all_ones = model(batch["input_ids"], attention_mask=torch.ones_like(batch["input_ids"]),
                                labels=batch["labels"], masked_positions=batch["masked_positions"])
    assert torch.equal(given["loss"], selected["loss"]) and torch.equal(given["logits"], selected["logits"])
    assert torch.equal(given["loss"], masked_all_ones["loss"])


def test_causal_loss_with_nothing_to_predict_is_zero_with_a_graph():
    model = GPT2ForCausalLM(tiny_config())
    ids = torch.randint(5, VOCAB, (2, 4))
    out = model(ids, labels=torch.full_like(ids, -100))
    assert out["loss"].item() == 0.0
    out["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    some = model(ids, labels=ids)
    assert torch.isfinite(some["loss"]) and some["loss"] > 0
