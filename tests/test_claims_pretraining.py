"""Pretraining variance in the claims' intervals (issue 27, item 3): the hierarchical bootstrap of
leanlm.claims.stats (pretraining seeds, then fine-tuning seeds, then examples), its coverage on simulated
data with a known effect, and what a profile that pretrains once says of its verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from leanlm.claims.stats import Measurement, SeedScores, basis_of, expansion, paired_bootstrap

TRUE_EFFECT = 0.5


def _diff(d):
    return d["a"] - d["b"]


def _world(rng, replicas: int, seeds: int, n: int, pretrain_sd: float, finetune_sd: float = 0.3,
           example_sd: float = 1.0) -> dict[str, list[list[np.ndarray]]]:
    """Per-example scores of models a and b: [replica][seed] -> (n,). A score is the model's mean, plus its
    replica's pretraining effect, plus the fine-tuning seed's effect, plus each example's difficulty (shared
    by every model and seed: the examples are crossed with them) and the model's own noise on the example.
    The effect of a over b, averaged over pretraining seeds, fine-tuning seeds and examples, is TRUE_EFFECT."""
    difficulty = rng.normal(0, 1, n)
    out = {}
    for name, mean in (("a", TRUE_EFFECT), ("b", 0.0)):
        pretrain = rng.normal(0, pretrain_sd, replicas)
        out[name] = [[mean + pretrain[r] + rng.normal(0, finetune_sd) + difficulty + rng.normal(0, example_sd, n)
                      for _ in range(seeds)] for r in range(replicas)]
    return out


def _measurement(per_replica: list[list[np.ndarray]], eval_set: str = "set") -> Measurement:
    seeds = [tuple(SeedScores(seed=s, value=float(x.mean()), statistic="mean", examples={"score": x},
                              eval_set=eval_set) for s, x in enumerate(replica)) for replica in per_replica]
    return Measurement(seeds[0], replicas=tuple(seeds[1:]), pretrain_seeds=tuple(range(len(seeds))))


def _coverage(datasets: int, replicas: int, pretrain_sd: float, draws: int = 400) -> tuple[float, float]:
    """Coverage of TRUE_EFFECT by the hierarchical interval (every replica) and by today's interval of a
    profile that pretrains once (the first replica's seeds and examples only), over simulated datasets."""
    rng = np.random.default_rng(20261128)
    hierarchical = flat = 0
    for i in range(datasets):
        world = _world(rng, replicas, seeds=3, n=60, pretrain_sd=pretrain_sd)
        both = {k: _measurement(v) for k, v in world.items()}
        once = {k: _measurement(v[:1]) for k, v in world.items()}
        h = paired_bootstrap(both, _diff, draws=draws, seed=i)
        f = paired_bootstrap(once, _diff, draws=draws, seed=i)
        hierarchical += h.low <= TRUE_EFFECT <= h.high
        flat += f.low <= TRUE_EFFECT <= f.high
    return hierarchical / datasets, flat / datasets


def test_the_hierarchical_interval_covers_the_true_effect_and_the_flat_one_does_not():
    """With pretraining variance as large as it can be between runs (a pretraining effect of sd 1 against
    example noise of sd 1 over 60 examples), 3 pretraining runs: the hierarchical interval covers the true
    effect about 95% of the time; the interval that resamples one pretraining run's seeds and examples, as
    every interval did before, covers it far less often, since it cannot see its run's own offset."""
    hierarchical, flat = _coverage(datasets=300, replicas=3, pretrain_sd=1.0)
    assert 0.90 <= hierarchical <= 0.99, hierarchical
    assert flat < 0.6, flat


def test_without_pretraining_variance_the_hierarchical_interval_is_not_much_wider():
    """Replicas that differ by their fine-tuning and example noise only: the widening applies to the
    pretraining seeds' share of the variance alone, so coverage stays near 95% rather than near 100%."""
    hierarchical, flat = _coverage(datasets=200, replicas=3, pretrain_sd=0.0)
    assert 0.90 <= hierarchical <= 0.995, hierarchical
    assert flat >= 0.85, flat


def test_models_pretrained_once_give_the_numbers_they_gave_before():
    """No replicas: the interval is the one of fine-tuning seeds and examples, says one pretraining run, and
    does not depend on whether the Measurement was given its (one) pretraining seed explicitly."""
    rng = np.random.default_rng(3)
    world = _world(rng, 1, seeds=3, n=50, pretrain_sd=1.0)
    plain = {k: Measurement(_measurement(v).seeds) for k, v in world.items()}
    explicit = {k: _measurement(v) for k, v in world.items()}
    a, b = paired_bootstrap(plain, _diff, draws=300), paired_bootstrap(explicit, _diff, draws=300)
    assert (a.low, a.high, a.estimate) == (b.low, b.high, b.estimate)
    assert a.pretraining_runs == 1 and a.basis == "examples+seeds"


def test_replicas_are_paired_across_models():
    """Replica k of A and replica k of B share their pretraining seed: where A's replicas are B's shifted by
    the effect, the pretraining seeds' differences cancel and the interval is as narrow as the examples
    allow; unpaired (other pretraining seeds for B) it is much wider."""
    rng = np.random.default_rng(5)
    world = _world(rng, 3, seeds=2, n=80, pretrain_sd=2.0)
    a = _measurement(world["a"])
    b_same = Measurement(_measurement([[x - TRUE_EFFECT for x in r] for r in world["a"]]).seeds,
                         replicas=_measurement([[x - TRUE_EFFECT for x in r] for r in world["a"]]).replicas,
                         pretrain_seeds=(0, 1, 2))
    paired = paired_bootstrap({"a": a, "b": b_same}, _diff, draws=300)
    b_other = Measurement(b_same.seeds, replicas=b_same.replicas, pretrain_seeds=(0, 3, 4))
    unpaired = paired_bootstrap({"a": a, "b": b_other}, _diff, draws=300)
    assert paired.width < 1e-9 < unpaired.width
    assert paired.basis == unpaired.basis == "pretraining+examples+seeds"
    assert paired.pretraining_runs == unpaired.pretraining_runs == 3


def test_seed_level_data_of_replicas_gets_a_t_interval_over_the_pretraining_seeds():
    """No per-example data: a paired t interval over the replicas' effects, with R-1 degrees of freedom."""
    from scipy import stats as sps

    per_replica = {"a": [[1.0, 1.2], [2.0, 2.2], [3.0, 3.4]], "b": [[0.0, 0.2], [0.5, 0.7], [1.0, 1.2]]}
    ms = {k: Measurement(tuple(SeedScores(s, v) for s, v in enumerate(rows[0])),
                         replicas=tuple(tuple(SeedScores(s, v) for s, v in enumerate(r)) for r in rows[1:]),
                         pretrain_seeds=(0, 1, 2)) for k, rows in per_replica.items()}
    iv = paired_bootstrap(ms, _diff)
    effects = np.array([np.mean(a) - np.mean(b) for a, b in zip(per_replica["a"], per_replica["b"])])
    half = sps.t.ppf(0.975, 2) * effects.std(ddof=1) / np.sqrt(3)
    assert iv.estimate == pytest.approx(effects.mean())
    assert (iv.low, iv.high) == pytest.approx((effects.mean() - half, effects.mean() + half))
    assert iv.basis == "pretraining+seeds" and iv.pretraining_runs == 3


def test_a_mix_of_replicated_and_once_pretrained_models_says_one_pretraining_run():
    rng = np.random.default_rng(7)
    world = _world(rng, 3, seeds=2, n=40, pretrain_sd=0.5)
    ms = {"a": _measurement(world["a"]), "b": _measurement(world["b"][:1])}
    iv = paired_bootstrap(ms, _diff, draws=200)
    assert iv.pretraining_runs == 1 and basis_of(list(ms.values())) == "examples+seeds"


def test_expansion_is_the_small_sample_t_correction():
    from scipy import stats as sps

    assert expansion(3, 0.95) == pytest.approx(np.sqrt(1.5) * sps.t.ppf(0.975, 2) / sps.norm.ppf(0.975))
    assert expansion(1000, 0.95) == pytest.approx(1.0, abs=0.01)


def test_replicas_must_be_fine_tuned_alike():
    with pytest.raises(ValueError, match="fine-tuned alike"):
        Measurement((SeedScores(0, 1.0), SeedScores(1, 1.0)), replicas=((SeedScores(0, 1.0),),), pretrain_seeds=(0, 1))
    with pytest.raises(ValueError, match="distinct pretraining seeds"):
        Measurement((SeedScores(0, 1.0),), replicas=((SeedScores(0, 1.0),),), pretrain_seeds=(0,))


def _pretrained_three_times(root):
    """The smoke profile (its file and config) with ch. 2's HashFormers pretrained with seeds 0, 1 and 2."""
    import yaml

    from leanlm.config import _load_matrix_cached, load_config

    path = root / "params" / "smoke.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["pretrain_seeds"] = {"seeds": [0, 1, 2], "experiments": ["ch2_hashformers"]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    _load_matrix_cached.cache_clear()
    return path, load_config(path)


def test_the_claims_read_every_pretraining_replica_of_their_runs(scratch_root):
    """A profile that pretrains the compared runs 3 times: each part's interval resamples the pretraining
    seeds (basis pretraining+...), the report says "3 pretraining runs"; a replica without results makes
    the part "not run", naming its file."""
    from leanlm.claims.report import evaluate_all, markdown, to_frame
    from test_claims import BASE, _write_claims, _write_run

    path, config = _pretrained_three_times(scratch_root)
    tasks = config["finetune"]["glue"]["tasks"]
    for suffix, shift in (("", 0.0), ("@p1", 0.03), ("@p2", -0.02)):
        _write_run(scratch_root, config, f"ch2_hashformers-lsh_pool{suffix}", 0.85 + shift, seeds=(0, 1), tasks=tasks)
        _write_run(scratch_root, config, f"ch2_hashformers-md5_pool{suffix}", 0.60 - shift, seeds=(0, 1), tasks=tasks)
    _write_run(scratch_root, config, "ch2_hashformers-md5_add", 0.6, seeds=(0, 1), tasks=tasks)
    claims = _write_claims(scratch_root, [
        {**BASE, "id": "ch2_replicated", "pairs": [["ch2_hashformers-lsh_pool", "ch2_hashformers-md5_pool"]]},
        {**BASE, "id": "ch2_replica_missing", "pairs": [["ch2_hashformers-md5_add", "ch2_hashformers-md5_pool"]]}])
    results = evaluate_all(config, draws=200, claims_file=claims)
    replicated, missing = results
    part = replicated.parts[0]
    assert replicated.verdict == "supported"
    assert part.interval.basis == "pretraining+examples+seeds" and part.interval.pretraining_runs == 3
    assert missing.verdict == "not run" and "ch2_hashformers-md5_add@p1" in missing.parts[0].reason
    md = markdown("smoke", results)
    assert "## ch2_replicated: **supported, 3 pretraining runs**" in md
    assert "Every judged claim on scores rests on models pretrained several times" in md
    frame = to_frame(results).set_index("claim")
    assert frame.loc["ch2_replicated", "pretraining_runs"] == 3 == frame.loc["ch2_replicated", "claim_pretraining_runs"]


def test_a_timing_part_says_nothing_of_pretraining_runs():
    """Step times do not depend on the pretraining seed: a speed part (family pretrain) is not "one
    pretraining run"; a score part is."""
    from types import SimpleNamespace

    from leanlm.claims.report import part_pretraining_runs, verdict_text
    from leanlm.claims.stats import Interval

    iv = Interval(1.0, 0.5, 1.5, 0.95, 100, "examples")
    assert part_pretraining_runs(SimpleNamespace(interval=iv, part=SimpleNamespace(family="pretrain"))) is None
    assert part_pretraining_runs(SimpleNamespace(interval=iv, part=SimpleNamespace(family="glue"))) == 1
    assert verdict_text("supported", None) == "supported" and verdict_text("untestable", 1) == "untestable"
    assert verdict_text("contradicted", 1) == "contradicted, one pretraining run"
    assert verdict_text("inconclusive", 3.0) == "inconclusive, 3 pretraining runs"


def test_a_ratio_part_over_replicas_is_widened_on_its_log_scale(scratch_root):
    """Replicas whose ratio differs a lot (the weaker model near chance in one replica), so the widening for 3
    pretraining runs is large. Made on the ratio's log scale, it says the same judged either way round: the
    interval of B / A is that of A / B inverted (to the percentiles' interpolation), and above 0. Widened
    linearly, it would not be: the two directions would disagree."""
    from leanlm.claims.report import evaluate_all
    from test_claims import BASE, _write_claims, _write_run

    path, config = _pretrained_three_times(scratch_root)
    lsh, md5 = "ch2_hashformers-lsh_pool", "ch2_hashformers-md5_pool"
    for suffix, weak in (("", 0.6), ("@p1", 0.05), ("@p2", 0.5)):
        _write_run(scratch_root, config, f"{lsh}{suffix}", 0.9, seeds=(0, 1), tasks=["sst2"])
        _write_run(scratch_root, config, f"{md5}{suffix}", weak, seeds=(0, 1), tasks=["sst2"])
    ratio = {**BASE, "tasks": ["sst2"], "metric": "accuracy", "effect": "ratio", "region": [1.0, 100.0]}
    claims = _write_claims(scratch_root, [{**ratio, "id": "ch2_ratio", "pairs": [[lsh, md5]]},
                                          {**ratio, "id": "ch2_ratio_inverted", "pairs": [[md5, lsh]]}])
    forward, inverted = (r.parts[0].interval for r in evaluate_all(config, draws=200, claims_file=claims))
    assert forward.pretraining_runs == 3 and forward.basis.startswith("pretraining")
    assert 0 < forward.low < forward.estimate < forward.high, forward
    assert inverted.estimate == pytest.approx(1 / forward.estimate)
    assert (inverted.low, inverted.high) == pytest.approx((1 / forward.high, 1 / forward.low), rel=0.01), (forward, inverted)


def test_replicas_are_read_each_from_its_own_record_and_must_share_fine_tuning_seeds(scratch_root):
    """Every replica of a run is read from its own record: a replica fine-tuned with fewer seeds leaves the part
    not run, listing each replica's seeds; a replica whose stored metric disagrees with its data is refused
    naming that replica's file and the command that reruns it."""
    import json

    from leanlm.claims.results import Missing, Results
    from leanlm.errors import DataError
    from test_claims import _write_run

    path, config = _pretrained_three_times(scratch_root)
    run = "ch2_hashformers-lsh_pool"
    for suffix, seeds in (("", (0, 1)), ("@p1", (0,)), ("@p2", (0, 1))):
        _write_run(scratch_root, config, f"{run}{suffix}", 0.8, seeds=seeds, tasks=["sst2"])
    with pytest.raises(Missing, match="^sst2 has no perplexity_ctx<n> metrics$"):
        Results(config).measurement(run, "glue", "sst2", "perplexity_ctx@max")
    with pytest.raises(Missing) as err:
        Results(config).measurement(run, "glue", "sst2", "primary")
    assert str(err.value) == (f"the pretraining replicas of {run} on sst2 have other fine-tuning seeds ({run}: [0, 1], "
                              f"{run}@p1: [0], {run}@p2: [0, 1]); rerun the ones that lack some")

    _write_run(scratch_root, config, f"{run}@p1", 0.8, seeds=(0, 1), tasks=["sst2"])
    replica = scratch_root / "results" / "smoke" / "runs" / f"{run}@p2" / "glue.json"
    record = json.loads(replica.read_text())
    record["results"][1]["metrics"]["accuracy"] += 0.01
    replica.write_text(json.dumps(record))
    with pytest.raises(DataError) as err:
        Results(config).measurement(run, "glue", "sst2", "primary")
    assert str(err.value).startswith(f"{replica} task sst2 seed 1: accuracy recomputed from its per-example data is")
    assert str(err.value).endswith(f"Rerun the job (`leanlm finetune --params {path} --run {run}@p2 --family glue`, or "
                                   "delete the file and run snakemake)")
