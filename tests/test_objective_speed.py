"""Ch. 2's pretraining speed (issue 27, item 4): the timing job's structure (interleaved rounds, one batch for
every model, per sample, the MLM head option), and the speed claims read its record, never the training
wall clock. No test asserts a timing: the clock is replaced by one that advances by a fixed cost per step."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from leanlm.benchmarks import objective_speed as speed
from leanlm.errors import DataError, LeanLMError
from leanlm.reporting.pretraining_speed import read_speed, speed_path, speed_settings

MLM, SR, PROJ = "ch2_hashformers-bert_mlm", "ch2_hashformers-bert_sr", "ch2_hashformers-md5_proj"
TINY = {"rounds": 4, "warmup_rounds": 1, "steps": 2, "batch_size": 3, "seq_len": 16, "mlm_head": "all"}


@pytest.fixture
def config():
    from leanlm.config import load_config

    config = load_config("params/smoke.yaml")
    config["speed"] = dict(TINY)
    return config


class FakeClock:
    """Advances by a fixed cost per training step of each objective: what a model costs, known exactly."""

    def __init__(self, cost):
        self.now, self.cost = 0.0, cost

    def __call__(self):
        return self.now


def _measure(config, monkeypatch, cost, runs=(MLM, SR, PROJ)):
    clock = FakeClock(cost)
    real_step = speed._step

    def step(case, batch, device, dtype):
        real_step(case, batch, device, dtype)
        clock.now += cost[case.run_id] * batch["input_ids"].size(0)  # seconds per sample x samples

    monkeypatch.setattr(speed, "_step", step)
    monkeypatch.setattr(speed.time, "process_time", clock)
    return speed.measure(config, device="cpu", runs=list(runs))


def test_rounds_are_interleaved_with_one_batch_and_the_time_is_per_sample(config, monkeypatch):
    record = _measure(config, monkeypatch, {MLM: 0.004, SR: 0.002, PROJ: 0.0025})
    orders = record["order"]
    assert len(orders) == TINY["rounds"] and all(sorted(o) == sorted([MLM, SR, PROJ]) for o in orders)
    assert all(b == a[1:] + a[:1] for a, b in zip(orders, orders[1:]))  # rotated by one each round
    assert {r["samples_per_round"] for r in record["runs"].values()} == {TINY["steps"] * TINY["batch_size"]}
    # per sample: the clock's cost per sample, whatever the steps and batch; paired round by round
    assert record["ms_per_sample"][MLM] == pytest.approx([4.0] * TINY["rounds"])
    assert record["ms_per_sample"][SR] == pytest.approx([2.0] * TINY["rounds"])
    assert record["speedup_vs_baseline"][SR] == pytest.approx(2.0)
    assert record["speedup_vs_baseline"][PROJ] == pytest.approx(1.6)
    assert record["settings"] == speed_settings(config) and record["profile"] == "smoke"


def test_every_model_steps_on_the_same_batch_size_and_length(config):
    cases = [speed.build_case(config, run, speed_settings(config), torch.device("cpu")) for run in (MLM, SR, PROJ)]
    for case in cases:
        assert len(case.batches) == TINY["steps"]
        assert {tuple(b["input_ids"].shape) for b in case.batches} == {(TINY["batch_size"], TINY["seq_len"])}
    assert "hash_bits" in cases[2].batches[0]  # a HashFormer's features are built before the clock starts
    again = speed.build_case(config, MLM, speed_settings(config), torch.device("cpu"))
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(cases[0].batches, again.batches))


def test_the_head_option_changes_the_heads_work_not_the_loss(config):
    settings = speed_settings(config)
    rows, losses = {}, {}
    for head in ("all", "labelled"):
        case = speed.build_case(config, MLM, {**settings, "mlm_head": head}, torch.device("cpu"))
        case.model.eval()  # no dropout: both heads see the same hidden states
        batch = case.batches[0]
        with torch.no_grad():
            losses[head] = float(case.loss(case.model, batch))
        speed._count_head_rows(case, batch, torch.device("cpu"), None)
        rows[head] = case.head_rows
        masked = int((batch["labels"] != -100).sum())
    assert rows["all"] == TINY["batch_size"] * TINY["seq_len"]       # transformers' BertForMaskedLM
    assert rows["labelled"] == masked < rows["all"]                   # this project's BertForMLM
    assert losses["all"] == pytest.approx(losses["labelled"], rel=1e-5)


def test_the_record_is_checked_against_the_profile(scratch_root, config, monkeypatch):
    from leanlm.io import write_json

    record = _measure(config, monkeypatch, {MLM: 0.004, SR: 0.002}, runs=(MLM, SR))
    path = write_json(speed_path("smoke"), record)
    assert read_speed(config)["ms_per_sample"][SR] == pytest.approx([2.0] * TINY["rounds"])
    changed = {**config, "speed": {**TINY, "mlm_head": "labelled"}}
    with pytest.raises(DataError, match="made with settings.*pretraining_speed"):
        read_speed(changed)
    path.write_text(json.dumps({**record, "ms_per_sample": {SR: [1.0]}}))
    with pytest.raises(DataError, match="must be 4 positive numbers"):
        read_speed(config)
    with pytest.raises(LeanLMError, match="mlm_head='every'"):
        speed_settings({**config, "speed": {**TINY, "mlm_head": "every"}})


# ----------------------------------------------------------------------------- the claims read it
def _claims_file(root, claims):
    path = root / "params" / "speed_claims.yaml"
    path.write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    return path


FASTER = {"id": "ch2_sr_faster", "chapter": 2, "where": "§2.5.3",
          "quote": "A sentence of the thesis, quoted for the test.", "family": "pretrain",
          "effect": "ratio", "test": "better", "margin": 1.0,
          "parts": [{"a": {"timing": SR}, "b": {"timing": MLM}}]}


def _world(root, config, training_ms, bench_ms):
    """pretrain.json with the training clock's times (``training_ms``), and the speed record (``bench_ms``)
    where given (tests/claims_world.py: a load shared by a round's models, and a little noise of each's)."""
    from claims_world import World

    world = World(root, config)
    for run, ms in training_ms.items():
        world.training_clock(run, ms)
    if bench_ms is not None:
        world.speed(bench_ms)


def test_the_speed_claim_never_reads_the_training_clock(scratch_root, config):
    """The defect: the claim was decided from pretrain.json's wall clock (other batches, a loaded machine)."""
    from leanlm.claims.report import evaluate_all

    config["speed"] = {**TINY, "rounds": 12}
    path = _claims_file(scratch_root, [FASTER])
    _world(scratch_root, config, {SR: 10.0, MLM: 20.0}, None)  # the training clock says 2x
    (result,) = evaluate_all(config, draws=300, claims_file=path)
    assert result.verdict == "not run" and "pretraining speed record" in result.parts[0].reason
    _world(scratch_root, config, {SR: 10.0, MLM: 20.0}, {SR: 12.0, MLM: 10.0})  # the bench: S+R slower
    (result,) = evaluate_all(config, draws=300, claims_file=path)
    part = result.parts[0]
    assert result.verdict == "contradicted", part
    assert part.a == pytest.approx(12.0) and part.b == pytest.approx(10.0)
    assert part.interval.basis == "rounds" and part.interval.width > 0  # a t interval over the paired rounds


def test_the_interval_pairs_rounds(scratch_root, config):
    """A load that moves every model of a round alike cancels in the ratio: paired rounds, a narrow interval."""
    from leanlm.claims.report import evaluate_all

    config["speed"] = {**TINY, "rounds": 12}
    path = _claims_file(scratch_root, [{**FASTER, "region": [1.9, 2.1]}])
    _world(scratch_root, config, {}, {SR: 10.0, MLM: 20.0})
    (result,) = evaluate_all(config, draws=300, claims_file=path)
    assert result.verdict == "supported" and 0 < result.parts[0].interval.width < 0.05
