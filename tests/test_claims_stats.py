"""The claims' statistics on synthetic results whose truth is known (leanlm.claims.stats)."""

import numpy as np
import pytest
from scipy import stats as sps
from sklearn import metrics as skm

from leanlm.claims.stats import (CONTRADICTED, INCONCLUSIVE, NOT_RUN, SUPPORTED, UNTESTABLE, Measurement, SeedScores,
                                 combine, paired_bootstrap, verdict)


def correctness(rng, p, n, shared=None, rho=0.0):
    """0/1 correctness with rate p; with ``shared`` uniforms, examples hard for one model are hard for
    the other (a paired design), as on a real evaluation set."""
    u = rng.random(n) if shared is None else np.where(rng.random(n) < rho, shared, rng.random(n))
    return (u < p).astype(float)


def measurement(scores_by_seed, eval_set="dev"):
    return Measurement(tuple(SeedScores(seed=i, value=float(np.mean(s)), statistic="mean",
                                        examples={"score": np.asarray(s)}, eval_set=eval_set)
                             for i, s in enumerate(scores_by_seed)))


def diff(d):
    return 100 * (d["a"] - d["b"])


BETTER = (0.0, np.inf)


def test_clear_win_is_supported_clear_loss_contradicted_noise_inconclusive():
    rng = np.random.default_rng(0)
    n = 2000
    shared = rng.random(n)
    good = measurement([correctness(rng, 0.80, n, shared, 0.7) for _ in range(3)])
    bad = measurement([correctness(rng, 0.60, n, shared, 0.7) for _ in range(3)])
    same = measurement([correctness(rng, 0.80, n, shared, 0.7) for _ in range(3)])
    win = paired_bootstrap({"a": good, "b": bad}, diff, draws=500)
    assert win.basis == "examples+seeds"
    assert 15 < win.estimate < 25 and verdict(win, BETTER) == SUPPORTED
    loss = paired_bootstrap({"a": bad, "b": good}, diff, draws=500)
    assert verdict(loss, BETTER) == CONTRADICTED
    noise = paired_bootstrap({"a": same, "b": good}, diff, draws=500)
    assert noise.low < 0 < noise.high and verdict(noise, BETTER) == INCONCLUSIVE


def test_interval_covers_the_true_effect_at_the_stated_rate():
    """Coverage simulation: paired accuracies on 400 examples, the true difference 0.05 (5 points)."""
    rng = np.random.default_rng(1)
    n, trials, covered = 400, 200, 0
    for t in range(trials):
        shared = rng.random(n)
        a = measurement([correctness(rng, 0.70, n, shared, 0.6)])
        b = measurement([correctness(rng, 0.65, n, shared, 0.6)])
        iv = paired_bootstrap({"a": a, "b": b}, diff, draws=400, seed=t)
        covered += iv.low <= 5.0 <= iv.high
    # 95% nominal; binomial sd over 200 trials ~1.5 points, the percentile interval a little liberal.
    assert 0.90 <= covered / trials <= 0.99


def test_pairing_narrows_the_interval_of_correlated_models():
    rng = np.random.default_rng(2)
    n = 1000
    shared = rng.random(n)
    a = measurement([correctness(rng, 0.7, n, shared, 0.9)])
    b = measurement([correctness(rng, 0.7, n, shared, 0.9)])
    paired = paired_bootstrap({"a": a, "b": b}, diff, draws=500)
    b_other = measurement([b.seeds[0].examples["score"]], eval_set="another set")
    unpaired = paired_bootstrap({"a": a, "b": b_other}, diff, draws=500)
    assert paired.width < 0.6 * unpaired.width


def test_seed_level_fallback_and_no_replicates():
    seeds = lambda values: Measurement(tuple(SeedScores(seed=i, value=v) for i, v in enumerate(values)))  # noqa: E731
    a, b = seeds([0.80, 0.81, 0.79, 0.80, 0.82]), seeds([0.60, 0.62, 0.61, 0.59, 0.60])
    iv = paired_bootstrap({"a": a, "b": b}, diff, draws=500)
    assert iv.basis == "seeds" and verdict(iv, BETTER) == SUPPORTED
    single = paired_bootstrap({"a": seeds([0.8]), "b": seeds([0.6])}, diff, draws=100)
    assert single.basis == "none" and single.width == 0 and verdict(single, BETTER) == INCONCLUSIVE


def test_regions_for_equivalence_and_margins():
    from leanlm.claims.stats import Interval

    iv = Interval(0.1, -0.3, 0.4, 0.95, 100, "examples")
    assert verdict(iv, (-0.5, 0.5)) == SUPPORTED        # A within 0.5 points of B
    assert verdict(iv, (1.0, np.inf)) == CONTRADICTED   # A more than 1 point better: excluded
    assert verdict(iv, (0.0, np.inf)) == INCONCLUSIVE


@pytest.mark.parametrize("name", ["accuracy", "f1", "macro_f1", "matthews", "pearson", "spearman"])
def test_recomputed_metrics_match_scikit_learn_and_scipy(name):
    rng = np.random.default_rng(3)
    n = 60
    if name in ("pearson", "spearman"):
        ref = np.round(rng.random(n) * 5, 1)
        pred = np.round(ref + rng.normal(0, 1, n), 1)
        want = {"pearson": sps.pearsonr, "spearman": sps.spearmanr}[name](pred, ref)[0]
    elif name == "macro_f1":  # CB: three classes, the rare one sometimes absent from a draw
        ref = rng.choice(3, n, p=[0.5, 0.4, 0.1])
        pred = np.where(rng.random(n) < 0.6, ref, rng.integers(0, 3, n))
        want = skm.f1_score(ref, pred, average="macro")
    else:
        ref = rng.integers(0, 2, n)
        pred = np.where(rng.random(n) < 0.7, ref, 1 - ref)
        want = {"accuracy": skm.accuracy_score, "f1": skm.f1_score, "matthews": skm.matthews_corrcoef}[name](ref, pred)
    s = SeedScores(seed=0, value=0.0, statistic=name, examples={"prediction": pred, "reference": ref})
    idx = np.stack([np.arange(n), rng.integers(0, n, n)])
    got = s.on(idx)
    assert got[0] == pytest.approx(want)
    sub = idx[1]
    again = SeedScores(seed=0, value=0.0, statistic=name,
                       examples={"prediction": pred[sub], "reference": ref[sub]}).on(np.arange(n)[None])
    assert got[1] == pytest.approx(again[0])


def test_perplexity_resamples_documents_whole():
    nll, units = np.array([10.0, 20.0, 30.0]), np.array([5.0, 10.0, 10.0])
    s = SeedScores(seed=0, value=0.0, statistic="perplexity", examples={"nll": nll, "units": units})
    assert s.on(np.arange(3)[None])[0] == pytest.approx(np.exp(60 / 25))
    assert s.on(np.array([[0, 0, 0]]))[0] == pytest.approx(np.exp(2.0))


def test_bad_per_example_data_is_refused():
    with pytest.raises(ValueError, match="lacks"):
        SeedScores(seed=0, value=0.5, statistic="mean", examples={"nll": np.ones(3)})
    with pytest.raises(ValueError, match="unknown per-example statistic"):
        SeedScores(seed=0, value=0.5, statistic="bleu?", examples={"score": np.ones(3)})


def test_combine_quantifiers():
    assert combine([SUPPORTED, SUPPORTED], "every") == SUPPORTED
    assert combine([SUPPORTED, INCONCLUSIVE], "every") == INCONCLUSIVE
    assert combine([SUPPORTED, CONTRADICTED], "every") == CONTRADICTED
    assert combine([SUPPORTED, SUPPORTED, INCONCLUSIVE], "most") == SUPPORTED
    assert combine([CONTRADICTED, SUPPORTED], "most") == CONTRADICTED
    assert combine([NOT_RUN, NOT_RUN], "every") == NOT_RUN
    assert combine([NOT_RUN, SUPPORTED], "every") == SUPPORTED


def test_seed_level_t_interval_covers_at_the_stated_rate():
    """Seed-level data only: per-seed scores with a shared seed effect (the paired design) and noise."""
    rng = np.random.default_rng(4)
    trials, covered = 400, 0
    for _ in range(trials):
        seed_effect = rng.normal(0, 0.02, 3)
        a = Measurement(tuple(SeedScores(seed=i, value=0.75 + e + rng.normal(0, 0.01)) for i, e in enumerate(seed_effect)))
        b = Measurement(tuple(SeedScores(seed=i, value=0.72 + e + rng.normal(0, 0.01)) for i, e in enumerate(seed_effect)))
        iv = paired_bootstrap({"a": a, "b": b}, diff)
        assert iv.basis == "seeds"
        covered += iv.low <= 3.0 <= iv.high
    assert 0.92 <= covered / trials <= 0.98


def test_row_ranks_equal_scipys_average_ranks_with_ties():
    """Spearman's draws rank every bootstrap row at once (leanlm.claims.stats._ranks_rows): the same average
    ranks as scipy.stats.rankdata, ties included (STS-B's references are rounded, so ties are common)."""
    import scipy.stats

    from leanlm.claims.stats import _ranks_rows

    rng = np.random.default_rng(0)
    for x in (rng.integers(0, 6, size=(50, 40)).astype(float), rng.random((3, 200)), np.zeros((2, 5)),
              np.arange(7.0)[None, ::-1]):
        assert np.allclose(_ranks_rows(x), np.apply_along_axis(scipy.stats.rankdata, 1, x))


def _iv(low, high, estimate=None, basis="examples"):
    from leanlm.claims.stats import Interval

    return Interval((low + high) / 2 if estimate is None else estimate, low, high, 0.95, 1000, basis)


def test_an_interval_is_degenerate_only_where_something_was_resampled_to_no_width():
    from leanlm.claims.stats import degenerate

    assert degenerate(_iv(0.0, 0.0)) and degenerate(_iv(-0.4e-12, 0.4e-12, 0.0))
    assert not degenerate(_iv(-0.75e-12, 0.75e-12, 0.0))          # wider than 1e-12 around an effect of 0
    assert degenerate(_iv(5.0, 5.0 + 4e-12, 5.0))                   # the width scales with the effect above 1
    assert not degenerate(_iv(0.0, 0.0, basis="none")) and not degenerate(_iv(0.0, 0.0, basis="undefined"))
    assert not degenerate(_iv(float("nan"), float("nan"), 0.0)) and not degenerate(_iv(-np.inf, np.inf, 0.0))


@pytest.mark.parametrize("interval, region, expected", [
    (_iv(1.0, 2.0), (1.0, np.inf), INCONCLUSIVE),       # touching the region's bound is not inside it
    (_iv(1.0 + 1e-9, 2.0), (1.0, np.inf), SUPPORTED),
    (_iv(-1.0, 1.0), (-np.inf, 1.0), INCONCLUSIVE),
    (_iv(0.0, 1.0), (1.0, np.inf), CONTRADICTED),       # wholly at or below the bound: none of it inside
    (_iv(1.0, 2.0), (-np.inf, 1.0), CONTRADICTED),
    (_iv(3.0, 4.0, basis="undefined"), (0.0, np.inf), INCONCLUSIVE),   # no interval, whatever its numbers
    (_iv(3.0, 4.0, basis="none"), (0.0, np.inf), INCONCLUSIVE),
    (_iv(3.0, np.inf), (0.0, np.inf), INCONCLUSIVE),
])
def test_a_verdict_needs_the_interval_strictly_inside_or_wholly_outside_the_region(interval, region, expected):
    from leanlm.claims.stats import verdict

    assert verdict(interval, region) == expected


@pytest.mark.parametrize("verdicts, expected", [
    ([SUPPORTED, CONTRADICTED, UNTESTABLE], INCONCLUSIVE),   # neither more than half supported nor half contradicted
    ([CONTRADICTED, CONTRADICTED, SUPPORTED, SUPPORTED], CONTRADICTED),   # half contradicted: "most" cannot hold
    ([SUPPORTED, SUPPORTED, CONTRADICTED], SUPPORTED),
])
def test_most_parts_means_more_than_half(verdicts, expected):
    from leanlm.claims.stats import combine

    assert combine(verdicts, "most") == expected


@pytest.mark.parametrize("level, draws, expected", [(0.95, 2000, 2000), (0.99, 100, 1000), (0.999, 3000, 10000)])
def test_draws_are_raised_until_each_tail_holds_enough(level, draws, expected):
    """Each tail of a level-L interval holds (1 - L) / 2 of the draws: at least TAIL_DRAWS (5) of them."""
    from leanlm.claims.stats import draws_for

    assert draws_for(level, draws) == expected


@pytest.mark.parametrize("draws", [1, 2000, 2500, 4001])
def test_many_draws_are_made_in_chunks_adding_up_to_the_draws_asked(draws):
    from leanlm.claims.stats import _effect_draws

    scores = SeedScores(seed=0, value=0.5, statistic="mean", examples={"score": np.linspace(0, 1, 50)}, eval_set="t")
    ms = {"a": Measurement((scores,)), "b": Measurement((scores,))}
    out = _effect_draws(ms, lambda d: d["a"] - d["b"], draws, np.random.default_rng(0), None)
    assert out.shape == (draws,)
