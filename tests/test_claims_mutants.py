"""Tests written to kill the claims' surviving mutants (docs/mutation-testing.md): each checks a behaviour of
leanlm.claims that no other test pinned down, against an independent computation where one exists."""

from __future__ import annotations

import numpy as np
import pytest

from leanlm.claims.draw_statistics import STATISTICS
from leanlm.claims.stats import INCONCLUSIVE, Measurement, SeedScores, paired_bootstrap, verdict
from leanlm.evaluation.metrics import compute, import_metric_modules

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
    assert reader.attention_parameters("ch3_encoder-mha", "superglue") == 1234


class _Reader:
    """Results.keeps_labels as a table: True/False per task, or Missing for a task whose results are absent."""

    def __init__(self, labels):
        self.labels = labels

    def keeps_labels(self, run_id, family, task, metric):
        from leanlm.claims.results import Missing

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
