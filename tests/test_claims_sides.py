"""How each side of a claim's part is computed, and which way round (leanlm.claims.verdicts._Sides and _effect):
a run's score and its direction, PRR and PEoP from the right runs, constants and timing sides, and the
effect formulas. Written to kill the verdicts' surviving mutants (docs/mutation-testing.md); each checks a
behaviour against an independent computation where one exists. Kept fast: these are in mutmut's selection,
where the every-claim test (tests/test_claims_every_claim.py) is too slow to be."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from leanlm.claims.stats import CONTRADICTED, SUPPORTED


@pytest.mark.parametrize("a_perplexity, b_perplexity, expected", [(30.0, 40.0, SUPPORTED), (40.0, 30.0, CONTRADICTED)])
def test_a_lower_is_better_metric_is_judged_the_right_way_round(scratch_root, a_perplexity, b_perplexity, expected):
    """The direction bug of issue 27 in the mutation selection (the every-claim test is too slow for it):
    "A better than B" on perplexity holds where A's is lower, and is contradicted where it is higher."""
    import yaml
    from claims_world import World

    from leanlm.claims.report import evaluate_all
    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / "smoke.yaml")
    world = World(scratch_root, config)
    for run_id, value in (("ch3_decoder-mha", a_perplexity), ("ch3_decoder-sha", b_perplexity)):
        world.family(run_id, "lm", lambda task, metric, v=value: v)
    path = scratch_root / "params" / "direction.yaml"
    path.write_text(yaml.safe_dump({"claims": [{
        "id": "ch3_mha_better_perplexity", "chapter": 3, "where": "Table 3.5", "quote": "A sentence the thesis prints.",
        "family": "lm", "tasks": ["wikitext103"], "test": "better", "pairs": [["ch3_decoder-mha", "ch3_decoder-sha"]]}]}))
    (result,) = evaluate_all(config, draws=300, claims_file=path)
    part = result.parts[0]
    assert (part.a, part.b) == pytest.approx((a_perplexity, b_perplexity), rel=1e-6)
    assert part.verdict == result.verdict == expected, (part.interval, part.reason)
    assert part.reason == "" and part.checked == []  # judged on its interval: nothing to explain
    assert part.interval.estimate == pytest.approx(b_perplexity - a_perplexity, rel=1e-6)  # how much lower A's is


@pytest.mark.parametrize("effect, margin, lower, expected", [
    ("difference", None, False, [2.0, -1.0]),   # A - B
    ("difference", None, True, [-2.0, 1.0]),    # B - A: how much lower A is
    ("factor", None, False, [2.0, -1.0]),       # no margin: a factor of 1, the difference
    ("factor", 2.0, False, [0.0, -5.0]),        # A - 2 B: "more than twice B" holds where positive
    ("factor", 2.0, True, [-6.0, -2.0]),        # B - 2 A (lower is better: "under half of B")
    ("ratio", None, False, [2.0, 0.75]),        # A / B
    ("ratio", None, True, [0.5, 4 / 3]),        # B / A
])
def test_each_effect_is_computed_the_right_way_round(effect, margin, lower, expected):
    from leanlm.claims.verdicts import _effect

    part = SimpleNamespace(effect=effect, margin=margin)
    a, b = np.array([4.0, 3.0]), np.array([2.0, 4.0])
    got = _effect(part, lambda d: a, lambda d: b, lower)(None)
    assert got == pytest.approx(expected)


def test_a_ratio_over_a_zero_score_is_not_finite_without_a_warning():
    """A draw where a side scores 0: its ratio is inf or NaN (the interval then says "undefined"), silently:
    a warning per draw would only bury the log."""
    import warnings

    from leanlm.claims.verdicts import _effect

    a, b = np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for lower in (False, True):
            got = _effect(SimpleNamespace(effect="ratio", margin=None), lambda d: a, lambda d: b, lower)(None)
            assert np.isnan(got[0]) and np.isinf(got).sum() == 1 and np.isfinite(got).sum() == 1


def test_a_part_averaging_higher_and_lower_is_better_metrics_is_not_run_saying_why(scratch_root):
    """WikiText's word perplexity and ARC-Easy's accuracy (each task's primary metric) averaged in one side: no
    direction fits both, so the part is not run, and the reason says to average one kind."""
    import yaml
    from claims_world import World

    from leanlm.claims.report import evaluate_all
    from leanlm.claims.stats import NOT_RUN
    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / "smoke.yaml")
    world = World(scratch_root, config)
    for run_id in ("ch4_uniform-standard", "ch4_uniform-mlp"):
        world.family(run_id, "lm_eval", lambda task, metric: 40.0)
    path = scratch_root / "params" / "mixed.yaml"
    path.write_text(yaml.safe_dump({"claims": [{
        "id": "ch4_mixed_average", "chapter": 4, "where": "Table 4.2", "quote": "A sentence the thesis prints.",
        "family": "lm_eval", "tasks": ["lm_eval_wikitext", "lm_eval_arc_easy"], "test": "better",
        "pairs": [["ch4_uniform-standard", "ch4_uniform-mlp"]]}]}))
    (result,) = evaluate_all(config, draws=300, claims_file=path)
    assert result.parts[0].verdict == NOT_RUN
    assert result.parts[0].reason == ("the tasks of lm_eval mix higher- and lower-is-better metrics; average one "
                                      "kind")


def test_prr_and_peop_sides_are_the_thesis_s_formulas_of_the_right_runs(scratch_root):
    """PRR (relative to MHA) and PEoP (relative to SHA, per attention parameter) sides, on a lower-is-better
    metric (their inverse forms), computed from the right runs' scores and parameter counts: each side equals
    leanlm.reporting.derived's formula applied by hand to the scores written, and is higher-is-better (so
    "better" means a larger PRR or PEoP)."""
    import yaml
    from claims_world import World

    from leanlm.claims.report import evaluate_all
    from leanlm.config import load_config
    from leanlm.reporting.derived import peop, prr

    config = load_config(scratch_root / "params" / "smoke.yaml")
    world = World(scratch_root, config)
    perplexity = {"ch3_decoder-mhe_mul": 33.0, "ch3_decoder-mha": 30.0, "ch3_decoder-sha": 40.0, "ch3_decoder-mqa": 36.0}
    attention = {"ch3_decoder-mhe_mul": 150, "ch3_decoder-mha": 200, "ch3_decoder-sha": 100, "ch3_decoder-mqa": 120}
    for run_id, value in perplexity.items():
        world.family(run_id, "lm", lambda task, metric, v=value: v, attention=attention[run_id])
    mhe, mha, sha, mqa = "ch3_decoder-mhe_mul", "ch3_decoder-mha", "ch3_decoder-sha", "ch3_decoder-mqa"
    base = {"chapter": 3, "where": "Table 3.5", "quote": "A sentence the thesis prints.", "family": "lm",
            "tasks": ["wikitext103"], "test": "better"}
    path = scratch_root / "params" / "derived.yaml"
    path.write_text(yaml.safe_dump({"claims": [
        {**base, "id": "ch3_prr_above_80", "parts": [{"a": {"prr": [mhe, mha]}, "b": {"constant": 80}}]},
        {**base, "id": "ch3_prr_of_mqa_below", "parts": [{"a": {"prr": [mqa, mha]}, "b": {"prr": [mhe, mha]}}]},
        {**base, "id": "ch3_peop_orders", "parts": [{"a": {"peop": mhe, "sha": sha}, "b": {"peop": mha, "sha": sha}}]},
    ]}, sort_keys=False))
    above, below, orders = (r.parts[0] for r in evaluate_all(config, draws=300, claims_file=path))

    assert above.a == pytest.approx(prr(33.0, 30.0, inverse=True), rel=1e-6) == pytest.approx(90.0, rel=1e-6)
    assert above.b == 80 and above.verdict == SUPPORTED  # 90 vs 80: higher is better
    assert (below.a, below.b) == pytest.approx((prr(36.0, 30.0, inverse=True), 90.0), rel=1e-6)
    assert below.verdict == CONTRADICTED  # MQA's 80 is below MHE's 90
    assert orders.a == pytest.approx(peop(33.0, 40.0, 150, 100, inverse=True), rel=1e-6) == pytest.approx(0.35, rel=1e-5)
    assert orders.b == pytest.approx(peop(30.0, 40.0, 200, 100, inverse=True), rel=1e-6) == pytest.approx(0.25, rel=1e-5)
    assert orders.verdict == SUPPORTED


def _lm_world(root, perplexity: dict[str, float]):
    """ch. 3 decoders' lm records (WikiText-103 and PTB) at the given perplexities; the smoke config."""
    from claims_world import World

    from leanlm.config import load_config

    config = load_config(root / "params" / "smoke.yaml")
    world = World(root, config)
    for run_id, value in perplexity.items():
        world.family(run_id, "lm", lambda task, metric, v=value: v)
    return config


def _judge(root, config, *parts, name="sides"):
    import yaml

    from leanlm.claims.report import evaluate_all

    path = root / "params" / f"{name}.yaml"
    base = {"chapter": 3, "where": "Table 3.5", "quote": "A sentence the thesis prints.", "test": "better"}
    path.write_text(yaml.safe_dump({"claims": [{**base, "id": f"ch3_{name}_{i}", **p} for i, p in enumerate(parts)]},
                                   sort_keys=False))
    return [r.parts[0] for r in evaluate_all(config, draws=300, claims_file=path)]


def test_a_constant_takes_the_direction_of_the_run_it_is_compared_with(scratch_root):
    """A perplexity below a constant is "better", whichever side the constant is on."""
    config = _lm_world(scratch_root, {"ch3_decoder-mha": 30.0, "ch3_decoder-sha": 40.0})
    lm = {"family": "lm", "tasks": ["wikitext103"]}
    run_first, constant_first, lost = _judge(
        scratch_root, config,
        {**lm, "parts": [{"a": "ch3_decoder-mha", "b": {"constant": 35}}]},    # 30 below 35
        {**lm, "parts": [{"a": {"constant": 35}, "b": "ch3_decoder-sha"}]},    # 35 below 40
        {**lm, "parts": [{"a": "ch3_decoder-sha", "b": {"constant": 35}}]})    # 40 is not below 35
    assert run_first.verdict == constant_first.verdict == SUPPORTED and lost.verdict == CONTRADICTED
    assert run_first.interval.estimate == pytest.approx(5.0, rel=1e-6)  # how much lower A is
    assert constant_first.interval.estimate == pytest.approx(5.0, rel=1e-6)


def test_sides_of_opposite_directions_are_refused_naming_the_part(scratch_root):
    """LAMBADA's perplexity (lower is better) against its accuracy (higher is better): no effect is defined."""
    from claims_world import World

    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / "smoke.yaml")
    world = World(scratch_root, config)
    for run_id in ("ch4_uniform-standard", "ch4_uniform-mlp"):
        world.family(run_id, "lm_eval", lambda task, metric: 40.0)
    lambada = {"family": "lm_eval", "tasks": ["lm_eval_lambada_openai"]}
    with pytest.raises(ValueError) as err:
        _judge(scratch_root, config, {**lambada, "parts": [{"a": {"run": "ch4_uniform-standard", "metric": "perplexity"},
                                                            "b": {"run": "ch4_uniform-mlp", "metric": "acc"}}]})
    assert str(err.value) == ("ch4_uniform-standard [perplexity] vs ch4_uniform-mlp [acc] on lm_eval "
                              "(lm_eval_lambada_openai): the two sides have opposite directions (one lower-is-better)")


def test_a_timing_difference_is_judged_on_the_rounds_differences_and_unequal_rounds_are_refused(scratch_root):
    """A timing part with ``effect: difference`` is judged on the per-round differences (their mean, not a
    geometric mean of ratios); a speed record whose runs have different numbers of rounds is refused when it is
    read, naming the record and the rule to rerun (no part pairs rounds that do not match)."""
    import json

    from claims_world import World

    from leanlm.config import load_config
    from leanlm.errors import DataError
    from leanlm.reporting.pretraining_speed import speed_path

    config = load_config(scratch_root / "params" / "smoke.yaml")
    sr, mlm = "ch2_hashformers-bert_sr", "ch2_hashformers-bert_mlm"
    World(scratch_root, config).speed({sr: 11.6, mlm: 24.9})
    timing = {"chapter": 2, "family": "pretrain", "parts": [{"a": {"timing": sr}, "b": {"timing": mlm}}]}
    (faster,) = _judge(scratch_root, config, {**timing, "effect": "difference", "region": [10, 16]}, name="timing")
    times = json.loads(speed_path("smoke").read_text())["ms_per_sample"]
    differences = np.array(times[mlm]) - np.array(times[sr])  # ms per sample saved by S+R, each round
    assert faster.interval.basis == "rounds" and faster.verdict == SUPPORTED
    # no family or task named: the times are a speed record's
    assert faster.label == f"pretraining ms/sample({sr}) vs pretraining ms/sample({mlm})"
    assert faster.interval.estimate == pytest.approx(differences.mean())

    record = json.loads(speed_path("smoke").read_text())
    record["ms_per_sample"][sr] = record["ms_per_sample"][sr][:-1]  # a record edited by hand
    speed_path("smoke").write_text(json.dumps(record))
    with pytest.raises(DataError, match=f"ms_per_sample of {sr} must be 5 positive numbers .one per round.*"
                                        "rerun its job .`snakemake --forcerun pretraining_speed"):
        _judge(scratch_root, config, {**timing, "effect": "ratio", "region": [1.5, 2.5]}, name="timing")


def test_a_baseline_side_names_the_task_that_lacks_the_metric_it_asks_for(scratch_root):
    """The Majority row of a context-length metric the task's results do not have: the part is not run, and the
    reason names the task."""
    from claims_world import World

    from leanlm.claims.stats import NOT_RUN
    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / "smoke.yaml")
    World(scratch_root, config).family("ch4_uniform-standard", "lm_eval", lambda task, metric: 40.0)
    (part,) = _judge(scratch_root, config, {"chapter": 4, "family": "lm_eval", "tasks": ["lm_eval_arc_easy"],
                                            "metric": "perplexity_ctx@max", "parts": [
                                                {"a": {"baseline": "majority"}, "b": "ch4_uniform-standard"}]})
    assert (part.verdict, part.reason) == (NOT_RUN, "lm_eval_arc_easy has no perplexity_ctx<n> metrics")


M = 1.25  # a margin (a difference of 1.25, or a ratio of 1.25)


@pytest.mark.parametrize("test, effect, margin, region", [
    ("better", "difference", M, (M, np.inf)),
    ("not_worse", "difference", M, (-M, np.inf)),
    ("equivalent", "difference", M, (-M, M)),
    ("worse", "difference", M, (-np.inf, -M)),
    ("not_better", "difference", M, (-np.inf, M)),
    ("better", "difference", None, (0.0, np.inf)),       # no margin: any improvement
    ("better", "ratio", M, (M, np.inf)),
    ("not_worse", "ratio", M, (1 / M, np.inf)),
    ("equivalent", "ratio", M, (1 / M, M)),
    ("worse", "ratio", M, (0.0, 1 / M)),
    ("not_better", "ratio", M, (0.0, M)),
    ("better", "ratio", None, (1.0, np.inf)),            # no margin: a ratio above 1
    ("better", "factor", 2.0, (0.0, np.inf)),            # A - 2 B above 0: "more than twice B"
    ("better", "factor", None, (0.0, np.inf)),
])
def test_each_test_allows_the_effects_the_claims_file_documents(test, effect, margin, region):
    """region_of, the effects a part's test allows (params/claims.yaml's header): differences around 0 by the
    margin, ratios around 1 by a factor, a factor effect (A - m B) above 0."""
    from leanlm.claims.spec import region_of

    assert region_of(test, effect, margin) == pytest.approx(region)


@pytest.mark.parametrize("test, effect, margin, message", [
    ("worse", "factor", 2.0, "effect factor supports test better only (A more than margin times B)"),
    ("equivalent", "factor", None, "effect factor supports test better only (A more than margin times B)"),
    ("better", "ratio", 0.0, "a ratio's margin is a factor > 0"),
    ("better", "ratio", -2.0, "a ratio's margin is a factor > 0"),
])
def test_a_region_no_test_can_have_is_refused_saying_why(test, effect, margin, message):
    from leanlm.claims.spec import region_of

    with pytest.raises(ValueError) as err:
        region_of(test, effect, margin)
    assert str(err.value) == message


@pytest.mark.parametrize("claim, raw, region, test", [
    ({}, {"region": [None, 0.5]}, (-np.inf, 0.5), "region"),          # an open end is unbounded
    ({}, {"region": [0.25, None]}, (0.25, np.inf), "region"),
    ({"region": [-1, 2]}, {}, (-1.0, 2.0), "region"),                  # the claim's region, for every part
    ({"region": [-1, 2]}, {"region": [0, 1]}, (0.0, 1.0), "region"),   # the part's own wins
    ({"margin": 0.5}, {}, (0.5, np.inf), "better"),                    # no region: the test's
])
def test_a_part_s_region_is_its_own_its_claim_s_or_its_test_s(claim, raw, region, test):
    from leanlm.claims.spec import _part

    part = _part({"family": "glue", "test": "better", **claim}, {"a": "ch9_x-a", "b": "ch9_x-b", **raw}, None, "w")
    assert (part.region, part.test) == (region, test)
    assert isinstance(part.region[0], float) and isinstance(part.region[1], float)
    assert (part.tasks, part.metric, part.effect) == ("average", "primary", "difference")  # the defaults


@pytest.mark.parametrize("claim, raw, message", [
    ({}, {"region": [1, 1]}, "w: region [1, 1] is empty"),
    ({}, {"region": [2, None], "test": "better"}, None),                 # not empty: (2, inf)
    ({"family": None}, {}, "w: no family (set it on the claim or the part)"),
    ({"effect": "factor", "test": "worse"}, {}, "w: effect factor supports test better only (A more than margin "
                                                "times B)"),
])
def test_a_part_that_cannot_be_judged_is_refused_where_it_is(claim, raw, message):
    from leanlm.claims.spec import _part
    from leanlm.errors import ConfigError

    build = lambda: _part({"family": "glue", "test": "better", **claim}, {"a": "ch9_x-a", "b": "ch9_x-b", **raw},  # noqa: E731
                          None, "w")
    if message is None:
        assert build().region == (2.0, np.inf)
        return
    with pytest.raises(ConfigError) as err:
        build()
    assert str(err.value) == message
