"""A claim's error rate is the stated one, whatever its number of parts (issue 27, item 3).

Under "every", one contradicted part contradicts the claim. With a 95% interval per part, a claim of 16
parts whose every effect sits exactly on its region's boundary (the claim holds, just) would be called
contradicted about 1 time in 3 (1 - 0.975**16). The stage gives each part a simultaneous interval
(Bonferroni: level 1 - 0.05/k over the claim's k parts), so the chance of any spurious contradiction is at
most 5%. Simulated here with the statistics functions on small synthetic measurements.
"""

from __future__ import annotations

import numpy as np
import pytest

from leanlm.claims.stats import (CONTRADICTED, LEVEL, Measurement, SeedScores, combine, draws_for,
                                 paired_bootstrap, simultaneous_level, verdict)

PARTS, EXAMPLES, REPEATS, DRAWS = 16, 60, 160, 400
MARGIN = 0.5  # "better by more than half a point": the region is (MARGIN, inf)


def _measurement(scores: np.ndarray, name: str) -> Measurement:
    return Measurement((SeedScores(seed=0, value=float(scores.mean()), statistic="mean",
                                   examples={"score": scores}, eval_set=name),))


def _claim_contradicted(rng, effects: np.ndarray, level: float, repeat: int) -> bool:
    """One synthetic claim: part j compares paired per-example scores whose true mean difference is
    effects[j] (A = B + effect + noise); the claim is judged at ``level`` per part."""
    verdicts = []
    for j, true_effect in enumerate(effects):
        b = rng.normal(50.0, 5.0, EXAMPLES)
        a = b + true_effect + rng.normal(0.0, 1.0, EXAMPLES)
        m = {"a": _measurement(a, f"set{j}"), "b": _measurement(b, f"set{j}")}
        interval = paired_bootstrap(m, lambda d: d["a"] - d["b"], draws=draws_for(level, DRAWS), level=level,
                                    seed=repeat * PARTS + j)
        verdicts.append(verdict(interval, (MARGIN, np.inf)))
    return combine(verdicts, "every") == CONTRADICTED


def test_simultaneous_level_and_draws():
    assert simultaneous_level(1) == LEVEL and simultaneous_level(16) == pytest.approx(1 - 0.05 / 16)
    assert simultaneous_level(0) == LEVEL  # no parts: nothing to share the error between
    # enough draws that each tail of the interval holds several of them
    assert draws_for(LEVEL, 2000) == 2000
    assert draws_for(simultaneous_level(16), 2000) * (1 - simultaneous_level(16)) / 2 >= 5


@pytest.mark.parametrize("where", ["boundary", "boundary and inside"])
def test_a_claim_that_holds_is_rarely_contradicted_whatever_its_number_of_parts(where):
    effects = np.full(PARTS, MARGIN)
    if where == "boundary and inside":
        effects[::2] = MARGIN + 1.0  # half the parts hold with room to spare
    rng = np.random.default_rng(27)
    adjusted = np.mean([_claim_contradicted(rng, effects, simultaneous_level(PARTS), r) for r in range(REPEATS)])
    rng = np.random.default_rng(27)
    unadjusted = np.mean([_claim_contradicted(rng, effects, LEVEL, r) for r in range(REPEATS)])
    tolerance = 2 * np.sqrt(0.05 * 0.95 / REPEATS)  # two Monte-Carlo standard errors at 5%
    assert adjusted <= 0.05 + tolerance, (adjusted, unadjusted)
    # the unadjusted rule: about 1 - 0.975**k spurious contradictions (k parts on the boundary)
    on_boundary = int((effects == MARGIN).sum())
    expected = 1 - 0.975 ** on_boundary
    assert unadjusted >= expected - 3 * np.sqrt(expected * (1 - expected) / REPEATS), (adjusted, unadjusted)


def test_the_stage_judges_a_claim_s_parts_at_the_simultaneous_level(scratch_root):
    """Three parts the profile runs (one lacks its results) and one it does not: k = 3, each interval at
    1 - 0.05/3; the not-run part does not count."""
    import yaml

    from leanlm.claims.report import evaluate_all
    from leanlm.config import load_config
    from test_claims import BASE, _write_run

    config = load_config(scratch_root / "params" / "smoke.yaml")
    for run_id, rate in (("ch2_hashformers-lsh_pool", 0.85), ("ch2_hashformers-md5_pool", 0.6),
                         ("ch2_hashformers-lsh_add", 0.8)):
        _write_run(scratch_root, config, run_id, rate, tasks=["sst2"])
    path = scratch_root / "params" / "test_claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [{**BASE, "id": "ch2_three_parts", "tasks": ["sst2"], "pairs": [
        ["ch2_hashformers-lsh_pool", "ch2_hashformers-md5_pool"], ["ch2_hashformers-lsh_add", "ch2_hashformers-md5_pool"],
        ["ch2_hashformers-lsh_proj", "ch2_hashformers-md5_pool"], ["ch3_encoder-mha", "ch3_encoder-sha"]]},
    ]}, sort_keys=False))
    config["experiments"] = [e for e in config["experiments"] if not e.startswith("ch3")]
    config["_matrix"] = {k: v for k, v in config["_matrix"].items() if not k.startswith("ch3")}
    (result,) = evaluate_all(config, draws=300, claims_file=path)
    first, second, missing, other = result.parts
    assert first.interval.level == second.interval.level == pytest.approx(1 - 0.05 / 3)
    assert first.interval.draws >= 300 and missing.verdict == other.verdict == "not run"
    # the same comparison alone is judged at 95%, with a narrower interval
    path.write_text(yaml.safe_dump({"claims": [{**BASE, "id": "ch2_one_part", "tasks": ["sst2"], "pairs": [
        ["ch2_hashformers-lsh_pool", "ch2_hashformers-md5_pool"]]}]}, sort_keys=False))
    (alone,) = evaluate_all(config, draws=300, claims_file=path)
    assert alone.parts[0].interval.level == LEVEL
    assert alone.parts[0].interval.width < first.interval.width
