"""The training engine: learning, exact resume after a kill, accumulation, early stopping, checkpoints,
NaN handling and a 2-process DDP run on CPU (gloo)."""

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from leanlm.errors import ConfigError, TrainingError
from leanlm.process_end import end_process
from leanlm.training import checkpointing
from leanlm.training.distributed import cleanup_distributed, init_distributed
from leanlm.training.engine import TrainConfig, Trainer, count_tokens
from leanlm.training.optimizer import adamw_param_groups
from leanlm.training.schedules import lr_multiplier
from leanlm.training.seeding import step_generator

W_TRUE = torch.tensor([1.5, -2.0, 0.5, 1.0])


class TinyRegressor(nn.Module):
    """y = f(x) with a LayerNorm (undecayed 1-D weights) and optional dropout (uses the global RNG)."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(4, 16), nn.LayerNorm(16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 1)
        )

    def forward(self, x, y, attention_mask=None):
        return {"loss": F.mse_loss(self.net(x).squeeze(-1), y)}


def make_batch(step: int, micro: int, rows: int = 8) -> dict:
    gen = step_generator(0, step, micro)
    x = torch.randn(rows, 4, generator=gen)
    mask = torch.ones(rows, 3, dtype=torch.long)
    mask[:, 2] = 0  # 2 "tokens" per row are real, 1 is padding
    return {"x": x, "y": x @ W_TRUE, "attention_mask": mask}


def fresh_model(dropout: float = 0.0) -> TinyRegressor:
    torch.manual_seed(123)
    return TinyRegressor(dropout)


def config(**overrides) -> TrainConfig:
    base = dict(total_steps=30, lr=1e-2, schedule="linear", warmup_steps=3, weight_decay=0.01,
                log_every=5, progress=False)
    return TrainConfig(**{**base, **overrides})


def weights(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@torch.no_grad()
def held_out_mse(model: nn.Module) -> dict:
    batch = make_batch(10_000, 0, rows=64)
    return {"mse": float(model(**batch)["loss"])}


class PerExampleLoss(TinyRegressor):
    """A mistake the engine must catch: a loss that is not reduced to the micro-batch mean."""

    def forward(self, x, y, attention_mask=None):
        return {"loss": (self.net(x).squeeze(-1) - y) ** 2}


# --------------------------------------------------------------------------------------- learning
def test_tiny_model_learns_and_summary_is_complete():
    model = fresh_model()
    summary = Trainer(model, config(total_steps=200, lr=3e-2, warmup_steps=10), make_batch, None).fit()
    first = summary["history"][0]["loss"]
    assert summary["steps"] == 200
    assert summary["mean_loss_last_10pct"] < 0.05 * first
    assert held_out_mse(model)["mse"] < 0.05 * first
    assert summary["tokens"] == 200 * 8 * 2  # non-pad attention_mask entries
    assert summary["tokens_per_s"] > 0 and summary["train_seconds"] > 0
    assert summary["resumed_from"] is None and summary["best_metric"] is None
    assert [r["step"] for r in summary["history"]] == list(range(5, 201, 5))
    for record in summary["history"]:  # the lr of the record's last update (0-based step - 1)
        assert record["lr"] == pytest.approx(3e-2 * lr_multiplier("linear", record["step"] - 1, 200, 10))


def test_bf16_autocast_on_cpu_trains():
    model = fresh_model()
    summary = Trainer(model, config(total_steps=40, lr=3e-2, precision="bf16"), make_batch, None).fit()
    assert summary["mean_loss_last_10pct"] < 0.5 * summary["history"][0]["loss"]


def test_grad_accumulation_equals_one_big_batch():
    def halves(step, micro):
        full = make_batch(step, 0)
        return {k: v[micro * 4:(micro + 1) * 4] for k, v in full.items()}

    # Adam is blind to the gradient's scale unless eps is large: eps=1 makes a sum-instead-of-mean
    # accumulation show up in the weights.
    one, two = fresh_model(), fresh_model()
    cfg = dict(total_steps=8, clip_norm=None, adam_eps=1.0, lr=0.1)
    s1 = Trainer(one, config(**cfg), lambda s, m: make_batch(s, 0), None).fit()
    s2 = Trainer(two, config(**cfg, grad_accum=2), halves, None).fit()
    for key, value in one.state_dict().items():
        torch.testing.assert_close(two.state_dict()[key], value, rtol=1e-5, atol=1e-6)
    assert s1["tokens"] == s2["tokens"] == 8 * 16
    assert s2["final_loss"] == pytest.approx(s1["final_loss"], rel=1e-5)


def test_no_weight_decay_on_biases_and_norm_weights():
    model = TinyRegressor()
    decay, no_decay = adamw_param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == ["net.0.weight", "net.4.weight"]
    assert sorted(names[id(p)] for p in no_decay["params"]) == [
        "net.0.bias", "net.1.bias", "net.1.weight", "net.4.bias"]


def test_count_tokens():
    mask = torch.tensor([[1, 1, 0, 0, 0]] * 2)
    assert count_tokens({"input_ids": torch.zeros(2, 5), "attention_mask": mask}) == 4
    assert count_tokens({"input_ids": torch.zeros(3, 7, dtype=torch.long)}) == 21
    assert count_tokens({"x": torch.zeros(6, 4)}) == 6


# ------------------------------------------------------------------------------------- resume
class Killed(Exception):
    pass


def test_resume_after_kill_is_exact(tmp_path):
    cfg = config(total_steps=30, grad_accum=2, checkpoint_every=10, eval_every=10)

    def run(run_dir, batch_at):
        model = fresh_model(dropout=0.2)  # dropout: the RNG state must be restored too
        trainer = Trainer(model, cfg, batch_at, run_dir, evaluate=held_out_mse)
        return model, trainer.fit()

    straight_model, straight = run(tmp_path / "straight", make_batch)

    def dies_at_25(step, micro):
        if (step, micro) == (25, 1):
            raise Killed()
        return make_batch(step, micro)

    with pytest.raises(Killed):
        run(tmp_path / "killed", dies_at_25)
    meta = json.loads((tmp_path / "killed" / "checkpoint" / "meta.json").read_text())
    assert meta["step"] == 20
    resumed_model, resumed = run(tmp_path / "killed", make_batch)

    assert resumed["resumed_from"] == 20 and straight["resumed_from"] is None
    assert_same_weights(weights(straight_model), weights(resumed_model))
    assert resumed["history"] == straight["history"]
    assert [r["step"] for r in resumed["history"] if "eval" in r] == [10, 20, 30]
    assert resumed["final_loss"] == straight["final_loss"]
    assert resumed["mean_loss_last_10pct"] == straight["mean_loss_last_10pct"]
    assert resumed["tokens"] == straight["tokens"]


def test_finished_checkpoint_returns_at_once_and_can_be_removed(tmp_path):
    cfg = config(total_steps=12, checkpoint_every=5)
    first = Trainer(fresh_model(), cfg, make_batch, tmp_path).fit()
    assert json.loads((tmp_path / "checkpoint" / "meta.json").read_text())["step"] == 12

    def never(step, micro):
        raise AssertionError("a finished run must not train again")

    again_model = fresh_model()
    trainer = Trainer(again_model, cfg, never, tmp_path)
    again = trainer.fit()
    assert again["steps"] == 12 and again["resumed_from"] == 12
    assert again["history"] == first["history"]
    trainer.remove_checkpoint()
    assert not (tmp_path / "checkpoint").exists()


def test_corrupt_checkpoint_names_the_file(tmp_path):
    state = tmp_path / "checkpoint" / "state.pt"
    state.parent.mkdir()
    state.write_bytes(b"this is not a checkpoint")
    with pytest.raises(TrainingError) as err:
        Trainer(fresh_model(), config(checkpoint_every=5), make_batch, tmp_path)
    assert str(state) in str(err.value) and "Delete" in str(err.value)


def test_checkpoint_of_other_settings_is_refused(tmp_path):
    Trainer(fresh_model(), config(total_steps=6, checkpoint_every=5), make_batch, tmp_path).fit()
    with pytest.raises(TrainingError, match=r"lr: 0.01 -> 0.02"):
        Trainer(fresh_model(), config(total_steps=6, lr=2e-2, checkpoint_every=5), make_batch, tmp_path)


def test_failed_save_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    real_write = checkpointing._write_state
    calls = []

    def flaky_write(state, path):
        calls.append(state["step"])
        if len(calls) == 2:  # the second save dies half-way through writing
            path.write_bytes(b"half a checkpo")
            raise OSError("No space left on device")
        real_write(state, path)

    monkeypatch.setattr(checkpointing, "_write_state", flaky_write)
    cfg = config(total_steps=6, checkpoint_every=2)
    with pytest.raises(TrainingError, match="could not write the checkpoint of step 4"):
        Trainer(fresh_model(), cfg, make_batch, tmp_path).fit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert json.loads((tmp_path / "checkpoint" / "meta.json").read_text())["step"] == 2
    monkeypatch.setattr(checkpointing, "_write_state", real_write)
    resumed = Trainer(fresh_model(), cfg, make_batch, tmp_path).fit()
    assert resumed["resumed_from"] == 2 and resumed["steps"] == 6


def test_kill_between_renames_is_recovered(tmp_path):
    Trainer(fresh_model(), config(total_steps=4, checkpoint_every=2), make_batch, tmp_path).fit()
    (tmp_path / "checkpoint").rename(tmp_path / ".checkpoint.previous")  # as if killed mid-swap
    state = checkpointing.load_checkpoint(tmp_path)
    assert state["step"] == 4 and (tmp_path / "checkpoint" / "state.pt").is_file()


# ----------------------------------------------------------------------- failures, early stopping
@pytest.mark.parametrize("prefetch", [0, 2])
def test_nan_loss_stops_before_the_update(tmp_path, prefetch):
    model = fresh_model()
    seen = {}

    def poisoned(step, micro):
        batch = make_batch(step, micro)
        if step == 3:
            batch["y"] = torch.full_like(batch["y"], float("nan"))
        return batch

    def step_starts(step):  # batches are built ahead, so the weights are taken when step 3 starts
        if step == 3:
            seen["weights"] = weights(model)  # the weights after step 2's update

    with pytest.raises(TrainingError) as err:
        Trainer(model, config(prefetch=prefetch), poisoned, tmp_path / "run", on_step_start=step_starts).fit()
    message = str(err.value)
    assert "step 3" in message and "nan" in message and str(tmp_path / "run") in message
    assert_same_weights(seen["weights"], weights(model))


def test_early_stopping_restores_the_best_state():
    scores = iter([0.5, 0.9, 0.7, 0.6, 0.99, 0.99])
    snapshots = {}
    model = fresh_model()

    def evaluate(m):
        snapshots[len(snapshots) + 1] = weights(m)
        return {"accuracy": next(scores), "loss": 0.0}

    cfg = config(total_steps=30, eval_every=3, early_stopping_patience=2)
    summary = Trainer(model, cfg, make_batch, None, evaluate=evaluate, primary_metric="accuracy").fit()
    assert summary["steps"] == 12  # evaluations at 3, 6 (best), 9, 12 -> two without improvement
    assert summary["best_metric"] == 0.9 and summary["best_step"] == 6
    assert [r["eval"]["accuracy"] for r in summary["history"] if "eval" in r] == [0.5, 0.9, 0.7, 0.6]
    assert_same_weights(snapshots[2], weights(model))
    assert model.training  # handed back in train mode


def test_lower_is_better_metric():
    scores = iter([3.0, 2.0, 2.5, 1.0])
    model = fresh_model()
    summary = Trainer(model, config(total_steps=12, eval_every=3), make_batch, None,
                      evaluate=lambda m: {"perplexity": next(scores)}, primary_metric="perplexity",
                      higher_is_better=False).fit()
    assert summary["best_metric"] == 1.0 and summary["best_step"] == 12


def test_bad_setups_are_config_errors():
    with pytest.raises(ConfigError, match="warmup_steps=50"):
        config(total_steps=10, warmup_steps=50)
    with pytest.raises(ConfigError, match="precision='fp16'"):
        config(precision="fp16")
    with pytest.raises(ConfigError, match="total_steps=None"):
        config(total_steps=None)
    with pytest.raises(ConfigError, match="adam_betas"):
        config(adam_betas=[0.9, 1.5])
    assert config(adam_betas=[0.9, 0.98]).adam_betas == (0.9, 0.98)  # YAML lists are accepted
    with pytest.raises(ConfigError, match="early_stopping_patience"):
        Trainer(fresh_model(), config(early_stopping_patience=2), make_batch, None)
    with pytest.raises(TrainingError, match="scalar tensor"):
        Trainer(PerExampleLoss(), config(), make_batch, None).fit()


# ------------------------------------------------------------------------------------------ DDP
DDP_STEPS = 6


def _ddp_config() -> TrainConfig:
    # grad_accum counts the micro-batches of a step over all ranks: one each on 2 ranks
    return config(total_steps=DDP_STEPS, warmup_steps=1, checkpoint_every=3, log_every=2, grad_accum=2)


def _ddp_worker(rank: int, world_size: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)

    def model_of_rank() -> nn.Module:
        model = with_unused_pooler(fresh_model())
        if rank == 1:  # a different init on rank 1: DDP must broadcast rank 0's weights
            torch.nn.init.zeros_(model.net[0].weight)
        return model

    def dies_at_4(step, micro):
        if step == 4:  # every rank dies at the same point, as under a killed torchrun job
            raise Killed()
        return make_batch(step, micro)

    try:
        model = model_of_rank()
        trainer = Trainer(model, _ddp_config(), make_batch, Path(out_dir) / "run")
        summary = trainer.fit()
        assert init_distributed()[:2] == (rank, world_size)
        # Gradients are views into DDP's all-reduce buckets (no copy between them after each backward).
        ddp = trainer.train_model
        assert ddp.gradient_as_bucket_view and not summary["compiled"]  # compile "auto": eager on CPU
        with pytest.raises(Killed):
            Trainer(model_of_rank(), _ddp_config(), dies_at_4, Path(out_dir) / "killed").fit()
        resumed_model = model_of_rank()
        resumed = Trainer(resumed_model, _ddp_config(), make_batch, Path(out_dir) / "killed").fit()
        torch.save({"weights": weights(model), "summary": summary, "resumed_weights": weights(resumed_model),
                    "resumed": resumed}, Path(out_dir) / f"rank{rank}.pt")
    finally:
        cleanup_distributed()
    # As leanlm.cli ends a torchrun process: a finalizing interpreter can be aborted by gloo's worker threads,
    # which DDP keeps alive (leanlm.process_end); mp.spawn's workers would otherwise finalize.
    end_process(0)


def with_unused_pooler(model: nn.Module) -> nn.Module:
    """A parameter the loss never uses (like BERT's pooler under MLM): plain DDP would reject it."""
    model.pooler = nn.Linear(2, 2)
    return model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                    reason="this torch build has no gloo backend for CPU process groups")
def test_two_process_ddp_matches_single_process_accumulation(tmp_path):
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    rank0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert_same_weights(rank0["weights"], rank1["weights"])
    # rank r took micro-batch r: the same global batch as one process of the same config (grad_accum=2)
    single = with_unused_pooler(fresh_model())
    reference = Trainer(single, config(total_steps=DDP_STEPS, warmup_steps=1, log_every=2, grad_accum=2),
                        make_batch, None).fit()
    for key, value in single.state_dict().items():
        torch.testing.assert_close(rank0["weights"][key], value, rtol=1e-5, atol=1e-6)
    assert rank0["summary"]["tokens"] == rank1["summary"]["tokens"] == reference["tokens"]
    assert rank0["summary"]["final_loss"] == pytest.approx(reference["final_loss"], rel=1e-5)
    # only rank 0 wrote the checkpoint, and it holds both ranks' RNG streams
    state = checkpointing.load_checkpoint(tmp_path / "run")
    assert state["step"] == DDP_STEPS and state["world_size"] == 2 and len(state["rng"]) == 2
    # a killed 2-process job resumes exactly
    for rank in (rank0, rank1):
        assert rank["resumed"]["resumed_from"] == 3
        assert_same_weights(rank["resumed_weights"], rank0["weights"])
        assert rank["resumed"]["history"] == rank0["summary"]["history"]


def test_world_size_must_divide_grad_accum():
    from leanlm.training.distributed import local_grad_accum

    assert local_grad_accum(4, 1) == 4 and local_grad_accum(4, 2) == 2 and local_grad_accum(4, 4) == 1
    with pytest.raises(ConfigError, match=r"pretrain.mlm.grad_accum: grad_accum = 3 .* 2 processes.* 1 / 3"):
        local_grad_accum(3, 2, "pretrain.mlm.grad_accum")
