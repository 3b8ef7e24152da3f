"""Tests written to kill the claims' surviving mutants (docs/mutation-testing.md): each checks a behaviour of
leanlm.claims that no other test pinned down, against an independent computation where one exists."""

from __future__ import annotations

import numpy as np
import pytest

from leanlm.claims.draw_statistics import STATISTICS
from leanlm.claims.stats import INCONCLUSIVE, Measurement, SeedScores, paired_bootstrap, verdict
from leanlm.evaluation.metrics import compute, import_metric_modules
from test_claims_review import _timing  # a timing side's rounds, as the claims read them

import_metric_modules()  # macro_f1 (CB) is registered with the SuperGLUE metrics


def _draws(n: int, rng) -> np.ndarray:
    """Resampling rows as a bootstrap draws them, plus the rows where a metric has an edge: one example
    repeated (one class only), and the first half of the examples (a class may be absent)."""
    rows = [rng.integers(0, n, n) for _ in range(6)]
    rows += [np.zeros(n, dtype=int), np.arange(n) % max(n // 2, 1)]
    return np.stack(rows)


@pytest.mark.parametrize("metric, classes", [("accuracy", 2), ("f1", 2), ("macro_f1", 3), ("macro_f1", 4),
                                             ("matthews", 2), ("matthews", 3), ("pearson", 0), ("spearman", 0)])
def test_each_draw_statistic_is_the_metric_recomputed_on_the_draw(metric, classes):
    """On every row of a draw matrix (several at once, as the claims draw them), the statistic equals the
    task metric leanlm.evaluation.metrics computes on that row's resampled examples."""
    rng = np.random.default_rng(classes)
    n = 40
    if classes:
        ref = rng.integers(0, classes, n)
        pred = np.where(rng.random(n) < 0.6, ref, rng.integers(0, classes, n))
        pred[-1] = classes - 1  # the last class only predicted late: absent from the first half's rows
        ref[-1] = classes - 1
    else:
        ref = rng.normal(size=n)
        pred = ref + rng.normal(size=n)
        pred[::7] = pred[0]  # ties, which the ranks share
    idx = _draws(n, rng)
    got = STATISTICS[metric]({"prediction": pred, "reference": ref}, idx)
    expected = [compute(metric, pred[row], ref[row]) for row in idx]
    assert got.shape == (len(idx),)
    assert got == pytest.approx(expected, abs=1e-9)


def test_perplexity_and_median_are_per_draw():
    rng = np.random.default_rng(1)
    nll, units = rng.random(30) * 50, rng.integers(5, 40, 30).astype(float)
    idx = _draws(30, rng)
    got = STATISTICS["perplexity"]({"nll": nll, "units": units}, idx)
    assert got == pytest.approx([np.exp(nll[row].sum() / units[row].sum()) for row in idx])
    times = rng.random(30)
    assert STATISTICS["median"]({"score": times}, idx) == pytest.approx([np.median(times[row]) for row in idx])
    assert STATISTICS["mean"]({"score": times}, idx) == pytest.approx([times[row].mean() for row in idx])


def test_bleu_of_a_draw_is_sacrebleus_corpus_bleu_of_its_sentences():
    """BLEU from summed sentence statistics equals sacrebleu's corpus BLEU of the resampled sentences."""
    import sacrebleu

    from leanlm.evaluation.bleu import STAT_FIELDS, sentence_statistics

    rng = np.random.default_rng(2)
    words = "the cat sat on a mat while dogs ran in the park".split()
    refs = [" ".join(rng.choice(words, 8)) for _ in range(12)]
    hyps = [" ".join(w if rng.random() < 0.7 else "x" for w in r.split()) for r in refs]
    stats = {k: np.asarray(v) for k, v in sentence_statistics(hyps, refs).items()}
    assert tuple(stats) == STAT_FIELDS
    idx = _draws(12, rng)[:6]
    got = STATISTICS["bleu"](stats, idx)
    expected = [sacrebleu.BLEU().corpus_score([hyps[i] for i in row], [[refs[i] for i in row]]).score / 100
                for row in idx]
    assert got == pytest.approx(expected, abs=1e-9)
    # the record check's recomputation of the whole set: the same corpus BLEU
    from leanlm.claims.results import recompute

    assert recompute("bleu", stats) == pytest.approx(sacrebleu.BLEU().corpus_score(hyps, [refs]).score / 100, abs=1e-12)


def test_replicas_with_an_undefined_effect_give_an_undefined_interval():
    """Seed-level data of replicated models where a replica's effect is not finite (a ratio over a zero
    score): the interval is undefined (no bounds, basis "undefined", the replicas counted), and its verdict
    inconclusive."""
    def replicated(rows):
        seeds = [tuple(SeedScores(s, v) for s, v in enumerate(r)) for r in rows]
        return Measurement(seeds[0], replicas=tuple(seeds[1:]), pretrain_seeds=(0, 1, 2))

    ms = {"a": replicated([[2.0, 2.2], [2.1, 2.3], [1.9, 2.0]]), "b": replicated([[1.0, 1.2], [0.0, 0.0], [1.1, 1.0]])}
    iv = paired_bootstrap(ms, lambda d: d["a"] / d["b"], level=0.9)
    estimate = np.mean([2.1, 2.2, 1.95]) / np.mean([1.1, 0.0, 1.05])
    assert iv.estimate == pytest.approx(estimate)
    assert np.isnan(iv.low) and np.isnan(iv.high) and iv.basis == "undefined"
    assert (iv.level, iv.draws, iv.pretraining_runs) == (0.9, 0, 3)
    assert verdict(iv, (1.0, np.inf)) == INCONCLUSIVE


def test_results_say_which_tasks_keep_labels_and_read_attention_parameters(scratch_root):
    """Results.keeps_labels: a GLUE task keeps its dev predictions and references, a task whose metrics are
    not recomputable per example (MultiRC's grouped F1a) none; a task the run has no results for raises
    Missing. Results.attention_parameters reads the record's count."""
    from claims_world import World

    from leanlm.claims.results import Missing, Results
    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / "smoke.yaml")
    world = World(scratch_root, config)
    world.family("ch3_encoder-mha", "superglue", lambda task, metric: 70.0, attention=1234)
    reader = Results(config)
    assert reader.keeps_labels("ch3_encoder-mha", "superglue", "boolq", "primary")
    assert not reader.keeps_labels("ch3_encoder-mha", "superglue", "multirc", "primary")
    with pytest.raises(Missing, match="no results of ch3_encoder-mha on glue"):
        reader.keeps_labels("ch3_encoder-mha", "glue", "boolq", "primary")
    with pytest.raises(Missing, match="^boolq has no perplexity_ctx<n> metrics$"):
        reader.keeps_labels("ch3_encoder-mha", "superglue", "boolq", "perplexity_ctx@max")
    assert reader.attention_parameters("ch3_encoder-mha", "superglue") == 1234


class _Reader:
    """Results.keeps_labels as a table: True/False per task, or Missing for a task whose results are absent;
    asked only of ``family`` (a fine-tuning family: an lm_eval or pretraining record has no dev labels, and
    Results would read the wrong record), each question recorded."""

    def __init__(self, labels, family="superglue"):
        self.labels, self.family, self.asked = labels, family, []

    def keeps_labels(self, run_id, family, task, metric):
        from leanlm.claims.results import Missing

        assert family == self.family, f"asked about {family}, not {self.family}"
        self.asked.append((run_id, task))
        if self.labels[task] is None:
            raise Missing(f"no {task} results")
        return self.labels[task]


@pytest.mark.parametrize("labels, expected", [
    ({"boolq": True, "cb": True, "multirc": False}, ["boolq", "cb"]),   # MultiRC keeps no labels: left out
    ({"boolq": True, "cb": True, "multirc": True}, None),               # every task keeps them: unchanged
    ({"boolq": False, "cb": False, "multirc": False}, None),            # none: unchanged (the check says why)
    ({"boolq": True, "cb": None, "multirc": False}, None),              # results absent: unchanged, so "not run"
])
def test_a_precondition_reading_labels_is_judged_on_the_tasks_that_keep_them(labels, expected):
    from leanlm.claims.spec import load_claims
    from leanlm.claims.verdicts import _labelled_tasks

    claim = next(c for c in load_claims() if c.id == "ch3_mha_best_absolute")
    part = next(p for p in claim.parts if p.family == "superglue")
    config = {"finetune": {"superglue": {"tasks": list(labels)}}}
    for cond in part.conditions:  # the Majority comparison and "predictions vary" read labels alike
        assert _labelled_tasks(cond, cond.part, config, None, _Reader(labels)) == expected
        assert _labelled_tasks(cond, cond.part, config, list(labels), _Reader(labels)) == (expected or list(labels))
        # one task of its own (a `tasks: each` part's): that task, where it keeps labels
        assert _labelled_tasks(cond, cond.part, config, ["cb"], _Reader(labels)) == ["cb"]


def test_a_precondition_reading_no_labels_keeps_its_tasks_and_asks_nothing():
    """A comparison of two runs (MHA beats SHA) reads no Majority row: judged on every task, MultiRC too; an
    lm_eval Majority comparison (ch. 4's NLU) has no dev labels to ask about."""
    from leanlm.claims.spec import load_claims
    from leanlm.claims.verdicts import _labelled_tasks

    labels = {"boolq": True, "cb": True, "multirc": False}
    claims = {c.id: c for c in load_claims()}
    part = next(p for p in claims["ch3_mhe_above_sha_everywhere"].parts if p.family == "superglue")
    (cond,) = [c for c in part.conditions if c.name == "ch3_mha_beats_sha"]
    config = {"finetune": {"superglue": {"tasks": list(labels)}}}
    reader = _Reader(labels)
    assert _labelled_tasks(cond, cond.part, config, None, reader) is None
    assert _labelled_tasks(cond, cond.part, config, ["multirc"], reader) == ["multirc"] and reader.asked == []

    ch4 = claims["ch4_uniform_mlp_near_random_nlu"].parts[0]
    (nlu,) = [c for c in ch4.conditions if c.name == "ch4_nlu_above_majority"]
    assert nlu.part.b.kind == "baseline" and (nlu.part.a.family or nlu.part.family) == "lm_eval"
    reader = _Reader({t: True for t in ch4.tasks}, family="none: lm_eval has no labels")
    assert _labelled_tasks(nlu, nlu.part, {}, list(ch4.tasks), reader) == list(ch4.tasks) and reader.asked == []


@pytest.mark.parametrize("a, b, ratio, defined", [
    ([10.0, 11.0], [5.0, 6.0], True, True),                     # two rounds: the fewest an interval needs
    ([10.0], [5.0], True, False),                               # one round: no spread to measure
    ([10.0, 11.0, 9.0], [12.0, 13.0, 11.5], True, True),        # a speed-up below 1 (A slower) is still one
    ([10.0, 11.0, 9.0], [0.0, 13.0, 11.5], True, False),        # a zero ratio has no logarithm
    ([10.0, 0.0, 9.0], [12.0, 13.0, 11.5], False, False),       # a difference that is not finite (here inf)
    ([10.0, 11.0, 9.0], [12.0, -13.0, 11.5], False, True),      # a difference may be negative
])
def test_the_rounds_interval_is_undefined_exactly_where_it_cannot_be_computed(a, b, ratio, defined):
    from leanlm.claims.speed import rounds_interval

    def effect(d):
        with np.errstate(divide="ignore"):
            return d["b"] / d["a"] if ratio else d["b"] - 1 / d["a"]  # a difference; 1/0 is not finite

    iv = rounds_interval({"a": _timing(a), "b": _timing(b)}, effect, 0.9, ratio=ratio)
    assert iv.extra == {"rounds": len(a)} and iv.level == 0.9 and iv.draws == 0
    if defined:
        assert iv.basis == "rounds" and np.isfinite([iv.estimate, iv.low, iv.high]).all() and iv.low < iv.high
    else:
        assert iv.basis == "undefined" and np.isnan([iv.estimate, iv.low, iv.high]).all()


def test_a_speed_measurement_is_the_records_rounds(scratch_root):
    """pretraining_speed: the run's rounds as float per-example data of seed 0 under one evaluation set shared
    by every timed run, its value the median; Missing (the part is "not run") without a record, or for a run
    the record did not time."""
    from claims_world import World

    from leanlm.claims.results import Missing
    from leanlm.claims.speed import pretraining_speed
    from leanlm.config import load_config
    from leanlm.reporting.pretraining_speed import speed_path

    config = load_config(scratch_root / "params" / "smoke.yaml")
    with pytest.raises(Missing, match=r"no pretraining speed record \(.*speed.*; rule pretraining_speed\)"):
        pretraining_speed(config, "ch2_hashformers-bert_sr")
    World(scratch_root, config).speed({"ch2_hashformers-bert_sr": 11.6, "ch2_hashformers-bert_mlm": 24.9})
    m = pretraining_speed(config, "ch2_hashformers-bert_sr")
    (seed,) = m.seeds
    assert seed.seed == 0 and seed.statistic == "median" and seed.value == pytest.approx(11.6)
    assert seed.eval_set == f"speed-rounds/{speed_path('smoke').name}"
    assert seed.examples["score"].dtype == np.float64 and len(seed.examples["score"]) > 1
    with pytest.raises(Missing, match=r"did not time ch2_hashformers-md5_add$"):
        pretraining_speed(config, "ch2_hashformers-md5_add")


def test_a_replica_t_interval_keeps_its_level_and_draws():
    def replicated(rows):
        seeds = [tuple(SeedScores(s, v) for s, v in enumerate(r)) for r in rows]
        return Measurement(seeds[0], replicas=tuple(seeds[1:]), pretrain_seeds=(0, 1, 2))

    ms = {"a": replicated([[2.0, 2.2], [2.1, 2.3], [1.9, 2.0]]), "b": replicated([[1.0, 1.2], [0.9, 1.1], [1.1, 1.0]])}
    iv = paired_bootstrap(ms, lambda d: d["a"] - d["b"], level=0.8)
    assert (iv.level, iv.draws, iv.basis, iv.pretraining_runs) == (0.8, 0, "pretraining+seeds", 3)


def test_macro_f1_counts_a_class_seen_once():
    """A class predicted once and never right has F1 0 and still counts in the mean (scikit-learn's macro)."""
    pred, ref = np.array([0, 0, 1, 2]), np.array([0, 0, 1, 1])
    got = STATISTICS["macro_f1"]({"prediction": pred, "reference": ref}, np.arange(4)[None, :])
    assert got[0] == pytest.approx(compute("macro_f1", pred, ref)) == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_the_widening_is_the_stated_formula():
    """widened: the interval scaled about the estimate by sqrt((expansion^2 pretraining + examples) / total);
    unchanged where the draws have no spread."""
    from leanlm.claims.hierarchical import expansion, widened

    e = expansion(3, 0.95)
    wanted = e ** 2 * 0.5 + 0.25
    low, high = widened(0.0, -1.0, 2.0, total=0.1, pretraining=0.5, examples=0.25, runs=3, level=0.95)
    factor = np.sqrt(wanted / 0.1)
    assert (low, high) == pytest.approx((-factor, 2 * factor))
    assert widened(0.0, -1.0, 2.0, total=0.0, pretraining=0.5, examples=0.25, runs=3, level=0.95) == (-1.0, 2.0)


def _replicated_examples(per_replica, eval_set="set"):
    seeds = [tuple(SeedScores(seed=s, value=float(np.mean(x)), statistic="mean", examples={"score": np.asarray(x)},
                              eval_set=eval_set) for s, x in enumerate(replica)) for replica in per_replica]
    return Measurement(seeds[0], replicas=tuple(seeds[1:]), pretrain_seeds=tuple(range(len(seeds))))


def test_resampling_the_examples_alone_keeps_every_replica_once():
    """The "examples" pass behind the widening: replicas and seeds stay in place, so replicas whose examples
    all score alike give every draw the measurement's value."""
    from leanlm.claims.stats import measurement_draws

    m = _replicated_examples([[[1.0] * 20, [1.0] * 20], [[3.0] * 20, [3.0] * 20], [[8.0] * 20, [8.0] * 20]])
    draws = measurement_draws({"a": m}, 200, np.random.default_rng(0), only="examples")["a"]
    assert draws == pytest.approx(np.full(200, m.value))
    pretraining = measurement_draws({"a": m}, 200, np.random.default_rng(0), only="pretraining")["a"]
    assert pretraining.std() > 0.5  # the replicas resampled: 1, 3 and 8 drawn with replacement


def test_evaluation_sets_of_replicated_models_are_drawn_each_from_its_own_examples():
    """Two sets of different sizes: each draw of a set indexes its own examples (B's last 20 of 50 score 1, so
    its draws average about 0.4, not the 0 of its first 30 alone)."""
    from leanlm.claims.stats import measurement_draws

    a = _replicated_examples([[np.zeros(30)], [np.zeros(30)]], eval_set="small")
    b = _replicated_examples([[np.r_[np.zeros(30), np.ones(20)]], [np.r_[np.zeros(30), np.ones(20)]]],
                             eval_set="large")
    draws = measurement_draws({"a": a, "b": b}, 400, np.random.default_rng(1))
    assert draws["b"].mean() == pytest.approx(0.4, abs=0.03)


def test_a_seed_t_interval_is_exact_and_undefined_where_an_effect_is_not_finite():
    """Seed-level data of models pretrained once: a paired t interval over the per-seed effects, k-1 degrees of
    freedom, the sample sd (ddof 1), its level kept and no draws; undefined (no bounds, basis "undefined")
    where a seed's effect is not finite."""
    from scipy import stats as sps

    def seeds(values):
        return Measurement(tuple(SeedScores(s, v) for s, v in enumerate(values)))

    a, b = [2.0, 2.5, 1.5, 2.2], [1.0, 1.1, 0.9, 1.3]
    iv = paired_bootstrap({"a": seeds(a), "b": seeds(b)}, lambda d: d["a"] - d["b"], level=0.8)
    effects = np.subtract(a, b)
    half = sps.t.ppf(0.9, 3) * effects.std(ddof=1) / np.sqrt(4)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((effects.mean(), effects.mean() - half, effects.mean() + half))
    assert (iv.level, iv.draws, iv.basis) == (0.8, 0, "seeds")
    with np.errstate(divide="ignore"):
        bad = paired_bootstrap({"a": seeds(a), "b": seeds([1.0, 0.0, 0.9, 1.3])}, lambda d: d["a"] / d["b"], level=0.8)
    assert bad.estimate == pytest.approx(np.mean(a) / np.mean([1.0, 0.0, 0.9, 1.3]))
    assert np.isnan(bad.low) and np.isnan(bad.high) and (bad.level, bad.draws, bad.basis) == (0.8, 0, "undefined")


def test_every_example_can_be_drawn():
    """Only example 0 of 10 scores 1: its draws average 0.1, for a model pretrained once and for one with
    replicas (an index drawn from 1..n-1 would never pick it)."""
    from leanlm.claims.stats import measurement_draws

    scores = np.r_[1.0, np.zeros(9)]
    once = Measurement((SeedScores(0, 0.1, "mean", {"score": scores}, "set"),))
    replicated = _replicated_examples([[scores], [scores]], eval_set="other")
    draws = measurement_draws({"a": once, "b": replicated}, 4000, np.random.default_rng(3))
    assert draws["a"].mean() == pytest.approx(0.1, abs=0.01) and draws["b"].mean() == pytest.approx(0.1, abs=0.01)


def test_replica_slot_zero_shares_its_seed_draw_with_models_pretrained_once():
    """A model with three replicas, each equal to a model B pretrained once (two seeds scoring 0 and 10): slot 0
    of A draws B's seeds (paired), the other two slots their own. So A - B = (X1 + X2 - 2 B) / 3 over the draws,
    of variance 6/9 of B's: pairing no slot would give 12/9, pairing every slot 0."""
    from leanlm.claims.stats import measurement_draws

    seed_scores = [np.zeros(5), np.full(5, 10.0)]
    a = _replicated_examples([seed_scores] * 3)
    b = Measurement(tuple(SeedScores(s, float(x.mean()), "mean", {"score": x}, "set") for s, x in enumerate(seed_scores)))
    draws = measurement_draws({"a": a, "b": b}, 6000, np.random.default_rng(4))
    b_var = draws["b"].var()  # 12.5: means 0, 5, 10 with probabilities 1/4, 1/2, 1/4
    assert np.var(draws["a"] - draws["b"]) / b_var == pytest.approx(6 / 9, abs=0.08)


def test_a_replicated_interval_is_reproducible_and_its_variance_passes_know_nothing_from_nothing():
    """The widening's single-level passes draw from the part's seed: the same interval twice; and a pass whose
    every draw is undefined has no variance (NaN), not an error."""
    from leanlm.claims.stats import _variance

    rng = np.random.default_rng(5)
    world = {k: [[rng.normal(mu + o, 1, 30) for _ in range(2)] for o in (0.0, 0.4, -0.3)] for k, mu in (("a", 1.0), ("b", 0.0))}
    ms = {k: _replicated_examples(v) for k, v in world.items()}
    first = paired_bootstrap(ms, lambda d: d["a"] - d["b"], draws=300, seed=3)
    again = paired_bootstrap(ms, lambda d: d["a"] - d["b"], draws=300, seed=3)
    assert (first.low, first.high) == (again.low, again.high) and first.basis == "pretraining+examples+seeds"
    nothing = _variance(ms, lambda d: d["a"] * np.nan, 50, 0, "pretraining", lambda x: x)
    assert np.isnan(nothing)
