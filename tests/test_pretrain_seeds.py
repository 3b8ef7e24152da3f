"""Pretraining replicas (profile key ``pretrain_seeds``, issue 27 item 3): the runs of the listed experiments
are pretrained once per seed, the first seed's replica being the run itself (same id, model path, results),
each further one a run of its own (``<experiment>-<run>@p<seed>``) pretrained with its seed and fine-tuned
and evaluated like the run; a profile without the key plans exactly what it did."""

from __future__ import annotations

import pytest
import yaml

from leanlm.errors import ConfigError
from test_loss_baselines import tiny_smoke  # noqa: F401  (a fixture: the smoke profile shrunk, tiny data on disk)


def _profile(root, name: str = "smoke", **block):
    """params/<name>.yaml of the scratch root with ``pretrain_seeds`` set to ``block`` (none: removed)."""
    path = root / "params" / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc.pop("pretrain_seeds", None)
    if block:
        doc["pretrain_seeds"] = block
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _load(path, subset=None):
    from leanlm.config import _load_matrix_cached, load_config

    _load_matrix_cached.cache_clear()
    return load_config(path, subset=subset)


def test_a_profile_without_the_key_plans_the_runs_it_did(scratch_root):
    """Smoke (no pretrain_seeds): every job is the matrix run it was, so its planned job count is unchanged."""
    from leanlm.runs import runs

    config = _load(scratch_root / "params" / "smoke.yaml")
    assert "pretrain_seeds" not in config
    assert [r.run_id for r in runs(config, with_replicas=True)] == [r.run_id for r in runs(config)]
    assert all(r.pretrain_seed == 0 and "@" not in r.run_id for r in runs(config))


def test_listed_experiments_are_pretrained_once_per_seed(scratch_root):
    from leanlm.runs import base_run_id, get_run, replica_groups, replica_seed, runs

    config = _load(_profile(scratch_root, seeds=[0, 3, 5], experiments=["ch3_encoder", "ch4_hybrid", "ch4_skip"]))
    matrix = runs(config)
    every = runs(config, with_replicas=True)
    # the tables' view is unchanged: the matrix's runs with their own ids, pretrained with seed 0
    assert matrix == runs(_load(_profile(scratch_root)))
    encoder = [r for r in matrix if r.experiment == "ch3_encoder"]
    replicas = [r for r in every if r.experiment == "ch3_encoder"]
    assert len(replicas) == 3 * len(encoder)
    mha = [r for r in replicas if r.name == "mha"]
    assert [(r.run_id, r.pretrain_seed) for r in mha] == [
        ("ch3_encoder-mha", 0), ("ch3_encoder-mha@p3", 3), ("ch3_encoder-mha@p5", 5)]
    # a replica is the run in all but its seed: same model, objective, fine-tuning families
    assert all(r.model == mha[0].model and r.finetune == mha[0].finetune and r.name == "mha" for r in mha)
    assert get_run(config, "ch3_encoder-mha@p5").pretrain_seed == 5
    assert replica_seed("ch3_encoder-mha@p5") == 5 and replica_seed("ch3_encoder-mha") == 0
    assert base_run_id("ch3_encoder-mha@p5") == "ch3_encoder-mha"
    assert replica_groups(config)["ch3_encoder-mha"] == ["ch3_encoder-mha", "ch3_encoder-mha@p3", "ch3_encoder-mha@p5"]
    # an experiment not listed keeps one pretraining run
    assert replica_groups(config)["ch3_decoder-mha"] == ["ch3_decoder-mha"]
    # ch. 4 skip's replicas evaluate the same replica of the hybrid they read
    assert get_run(config, "ch4_skip-mlp@p3").evaluate_from == "ch4_hybrid-mlp@p3"
    assert get_run(config, "ch4_skip-mlp").evaluate_from == "ch4_hybrid-mlp"
    with pytest.raises(ConfigError, match="no run 'ch3_decoder-mha@p3'"):
        get_run(config, "ch3_decoder-mha@p3")


def test_a_hub_checkpoint_is_not_replicated(scratch_root):
    """A downloaded checkpoint has no seed: ch. 2's CANINE-C (hub profiles only) keeps one run."""
    from leanlm.runs import UNSEEDED_OBJECTIVES, runs

    config = _load(_profile(scratch_root, seeds=[0, 1], experiments=["ch2_hashformers"]))
    config["source"] = "hub"
    config["absent_runs"] = {}
    every = [r for r in runs(config, with_replicas=True) if r.experiment == "ch2_hashformers"]
    hub = [r for r in every if r.objective in UNSEEDED_OBJECTIVES]
    assert hub and all("@" not in r.run_id for r in hub)
    assert len(every) == 2 * len([r for r in runs(config) if r.experiment == "ch2_hashformers"]) - len(hub)


@pytest.mark.parametrize("block, message", [
    ({"seeds": [1, 2], "experiments": ["ch3_encoder"]}, r"pretrain_seeds.seeds starts with 1, but its first seed must be 0"),
    ({"seeds": [0, 1], "experiments": ["ch3_encoderr"]}, r"pretrain_seeds.experiments lists ch3_encoderr, which the profile"),
    ({"seeds": [0, 1], "experiments": ["ch4_skip"]}, r"ch4_skip, whose run mlp evaluates ch4_hybrid-mlp's model: .*list ch4_hybrid"),
    ({"seeds": [0], "experiments": ["ch3_encoder"]}, r"key pretrain_seeds\.seeds = \[0\]: \[0\] is too short"),
    ({"seeds": [0, 0], "experiments": ["ch3_encoder"]}, r"key pretrain_seeds\.seeds = \[0, 0\]: .* non-unique"),
    ({"seeds": [0, 1], "experiments": ["ch3_encoder"], "count": 3}, r"key pretrain_seeds\.count is not allowed"),
    ({"seeds": [0, 1]}, r"key pretrain_seeds: 'experiments' is a required property"),
])
def test_a_bad_pretrain_seeds_block_is_refused_naming_the_key(scratch_root, block, message):
    with pytest.raises(ConfigError, match=message):
        _load(_profile(scratch_root, **block))


def test_a_subset_keeps_the_replicas_of_the_experiments_it_runs(scratch_root):
    """The block is checked against the whole profile; a subset runs the replicas of its own experiments."""
    from leanlm.runs import runs

    # ch4_uniform too: the cpu subset narrows its replicas (to none), which needs replicas to narrow
    path = _profile(scratch_root, "signal", seeds=[0, 1, 2], experiments=["ch3_decoder", "ch3_encoder", "ch4_uniform"])
    config = _load(path, subset="cpu")
    ids = {r.run_id for r in runs(config, with_replicas=True)}
    # signal's cpu subset keeps the replicas of ch3_decoder's SHA and MHA only (its `replicas`)
    assert {"ch3_decoder-mha@p2", "ch3_decoder-sha@p1"} <= ids and "ch3_decoder-mhe_add@p1" not in ids
    assert not any(i.startswith("ch3_encoder-") for i in ids)


def test_a_replica_whose_evaluated_model_has_no_replica_is_refused(scratch_root):
    """A run evaluating a hub checkpoint's model (which has no seed, so no replicas): its replicas would
    evaluate a replica that is never made, so the profile is refused before any job, naming both runs."""
    from leanlm.runs import runs
    from params_files import edit_yaml

    edit_yaml(scratch_root / "params" / "experiments" / "ch2.yaml", lambda doc: doc["ch2_hashformers"]["runs"].update(
        canine_c_again={"tokenizer": "profile", "evaluate_from": "canine_c"}))
    path = scratch_root / "params" / "paper.yaml"  # source: hub, so CANINE-C is a run of it
    assert "ch2_hashformers-canine_c_again" in {r.run_id for r in runs(_load(path))}
    with pytest.raises(ConfigError, match=r"paper\.yaml: run ch2_hashformers-canine_c_again@p1 evaluates "
                                          r"'ch2_hashformers-canine_c@p1', which is no trained run of this profile: "
                                          r"ch2_hashformers-canine_c is pretrained once"):
        _load(_profile(scratch_root, "paper", seeds=[0, 1], experiments=["ch2_hashformers"]))


def test_the_pretraining_seed_reaches_the_trainer_and_the_batches(tiny_smoke, monkeypatch):
    """Everything PRETRAIN_SEED seeds today follows a replica's own seed, through the real ``leanlm pretrain``
    path (profile -> run -> objective -> packing -> engine): the initialisation, the batches (order and
    masking) and the engine's seed (its data order on resume)."""
    import torch

    from leanlm.stages.pretrain import pretrain
    from leanlm.training import engine

    seen = {}
    init = engine.Trainer.__init__

    def recording_init(self, model, config, batch_at, *args, **kwargs):
        seen[config.desc] = (config.seed, [p.detach().clone() for p in model.parameters()], batch_at(0, 0))
        init(self, model, config, batch_at, *args, **kwargs)

    monkeypatch.setattr(engine.Trainer, "__init__", recording_init)
    config = _load(_profile(tiny_smoke, seeds=[0, 7], experiments=["ch3_encoder"]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        records = {run_id: pretrain(config, run_id) for run_id in ("ch3_encoder-mha", "ch3_encoder-mha@p7")}
    finally:
        torch.set_num_threads(threads)
    (seed, weights, batch), (replica_seed, replica_weights, replica_batch) = (
        seen["pretrain ch3_encoder-mha"], seen["pretrain ch3_encoder-mha@p7"])
    assert (seed, replica_seed) == (0, 7)
    assert len(weights) == len(replica_weights)
    assert any(not torch.equal(a, b) for a, b in zip(weights, replica_weights)), "the replica's initialisation is the run's"
    assert not torch.equal(batch["input_ids"], replica_batch["input_ids"]), "the replica's first batch is the run's"
    assert records["ch3_encoder-mha@p7"]["run_id"] == "ch3_encoder-mha@p7"
    assert records["ch3_encoder-mha"]["history"] != records["ch3_encoder-mha@p7"]["history"]


def test_signal_pretrains_the_claims_models_at_least_three_times():
    """params/signal.yaml replicates every experiment whose runs params/claims.yaml compares."""
    from leanlm.claims.spec import load_claims
    from leanlm.config import load_config

    config = load_config("params/signal.yaml")
    compared = {run.split("-", 1)[0] for claim in load_claims() for part in claim.parts
                for side in (part.a, part.b) for run in side.runs}
    assert len(config["pretrain_seeds"]["seeds"]) >= 3
    assert compared <= set(config["pretrain_seeds"]["experiments"])


def test_the_aggregate_carries_the_pretraining_seed_and_tables_read_the_first_replica(scratch_root):
    from leanlm.reporting.aggregate import load, write_piece
    from leanlm.reporting.render import first_replicas
    from test_claims import _write_run

    config = _load(_profile(scratch_root, seeds=[0, 4], experiments=["ch2_hashformers"]))
    tasks = config["finetune"]["glue"]["tasks"][:2]
    for run_id in ("ch2_hashformers-lsh_pool", "ch2_hashformers-lsh_pool@p4"):
        _write_run(scratch_root, config, run_id, 0.7, seeds=(0, 1), tasks=tasks)
    write_piece("smoke", "ch2_hashformers", config)
    tidy = load("smoke", ["ch2_hashformers"])
    seeds = tidy.groupby("run_id")["pretrain_seed"].unique().to_dict()
    assert {k: list(v) for k, v in seeds.items()} == {"ch2_hashformers-lsh_pool": [0], "ch2_hashformers-lsh_pool@p4": [4]}
    assert set(tidy["run"]) == {"lsh_pool"}  # replicas group with their run by (run, pretrain_seed)
    assert set(first_replicas(tidy)["run_id"]) == {"ch2_hashformers-lsh_pool"}
    assert first_replicas(tidy.drop(columns="pretrain_seed")).shape[0] == tidy.shape[0]
    # a piece aggregated before replicas existed, beside a newer one: its rows (no seed) are first replicas
    mixed = tidy.copy()
    mixed["pretrain_seed"] = mixed["pretrain_seed"].astype(object)
    mixed.loc[mixed["run_id"] == "ch2_hashformers-lsh_pool", "pretrain_seed"] = None
    assert set(first_replicas(mixed)["run_id"]) == {"ch2_hashformers-lsh_pool"}
