"""Per-example evaluation data (leanlm.evaluation.per_example): what the claims' bootstrap resamples
must give back, on the full set, the very number the evaluation reported."""

from __future__ import annotations

import numpy as np
import pytest
from test_lm_eval_adapter import TEXTS, make_model, offline_datasets, tokenizer, write_task  # noqa: F401

from leanlm.claims.stats import SeedScores
from leanlm.evaluation import per_example
from leanlm.lm_eval.adapter import run_lm_eval
from leanlm.evaluation.metrics import compute_all


def observed(record: dict, metric: str) -> float:
    """The metric recomputed from the per-example record on every example (no resampling)."""
    statistic, roles = record["statistics"][metric]
    from leanlm.claims.stats import FIELDS, PAIR_FIELDS

    fields = {role: np.asarray(record["data"][roles.get(role, role)]) for role in FIELDS.get(statistic, PAIR_FIELDS)}
    n = len(next(iter(fields.values())))
    return float(SeedScores(seed=0, value=0.0, statistic=statistic, examples=fields).on(np.arange(n)[None])[0])


def test_classification_record_reproduces_the_reported_metrics():
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 2, 50).tolist()
    pred = [r if rng.random() < 0.7 else 1 - r for r in ref]
    metrics = ["f1", "accuracy", "matthews"]
    record = per_example.classification(pred, ref, metrics)
    reported = compute_all(metrics, pred, ref)
    for metric in metrics:
        assert observed(record, metric) == pytest.approx(reported[metric])
    assert record["data"]["prediction"] == pred  # integers stay integers (compact JSON)


def test_grouped_only_metrics_keep_no_per_example_record():
    assert per_example.classification([1, 0], [1, 1], ["f1a", "group_em"]) is None


def test_lm_eval_samples_reproduce_lm_eval_scores(tokenizer, tmp_path, offline_datasets):  # noqa: F811
    """lm-eval's own logged samples (log_samples) of a multiple-choice and a rolling-loglikelihood task."""
    rows = [{"query": "the cat sat on the", "choices": ["mat", "dog", "sky"], "label": 0},
            {"query": "a dog ran in the", "choices": ["park", "sun"], "label": 0},
            {"query": "the sky is", "choices": ["hot", "blue"], "label": 1}]
    write_task(tmp_path, "leanlm_tiny_choice", rows, "multiple_choice")  # as the tasks stage writes stand-ins
    write_task(tmp_path, "leanlm_wikitext", [{"page": t} for t in TEXTS], "loglikelihood_rolling")
    samples: dict = {}
    results = run_lm_eval(make_model(tokenizer), tokenizer, ["leanlm_tiny_choice", "leanlm_wikitext"], str(tmp_path),
                          batch_size=4, bootstrap_iters=0, samples=samples)
    choice = per_example.lm_eval(samples["leanlm_tiny_choice"])
    assert len(choice["data"]["acc"]) == len(rows)
    assert observed(choice, "acc") == pytest.approx(results["leanlm_tiny_choice"]["acc"])
    pages = per_example.lm_eval(samples["leanlm_wikitext"])
    assert pages["data"]["words"] == [len(t.split()) for t in TEXTS]
    assert observed(pages, "word_perplexity") == pytest.approx(results["leanlm_wikitext"]["word_perplexity"], rel=1e-5)


def test_span_qa_record_reproduces_squad_scores():
    from leanlm.evaluation.squad import as_references

    answers = ["the cat", "blue", "", "in the park"]
    golds = [["the cat", "a cat"], ["the sky"], [], ["the park"]]
    record = per_example.span_qa(answers, golds, ["squad_f1", "squad_em"])
    reported = compute_all(["squad_f1", "squad_em"], np.asarray(answers, dtype=object), as_references(golds))
    for metric in ("squad_f1", "squad_em"):
        assert observed(record, metric) == pytest.approx(reported[metric])


def test_bleu_record_reproduces_corpus_bleu_and_its_resamples():
    from leanlm.evaluation.bleu import STAT_FIELDS, sentence_statistics

    hyps = ["Das Haus ist klein .", "Der Hund bellt laut", "Ich gehe heute nach Hause", "Guten Morgen"]
    refs = ["Das Haus ist klein .", "Der Hund bellt", "Heute gehe ich nach Hause", "Guten Abend"]
    record = per_example.scores(sentence_statistics(hyps, refs), {"bleu": ["bleu", {}]})
    assert tuple(record["data"]) == STAT_FIELDS
    assert observed(record, "bleu") == pytest.approx(compute_all(["bleu"], hyps, refs)["bleu"])
    pick = [0, 2, 2, 3]  # a bootstrap draw is the corpus BLEU of the drawn sentences
    fields = {k: np.asarray(v) for k, v in record["data"].items()}
    drawn = SeedScores(seed=0, value=0.0, statistic="bleu", examples=fields).on(np.array([pick]))[0]
    assert drawn == pytest.approx(compute_all(["bleu"], [hyps[i] for i in pick], [refs[i] for i in pick])["bleu"])


def test_perplexity_windows_reproduce_the_perplexity():
    from leanlm.evaluation.perplexity import perplexity

    nll, tokens = [12.5, 30.1, 7.7], [5, 12, 3]
    record = per_example.scores({"nll": nll, "tokens": tokens}, {"perplexity": ["perplexity", {"nll": "nll", "units": "tokens"}]})
    assert observed(record, "perplexity") == pytest.approx(perplexity(np.array(nll), np.array(tokens)))


def test_nearly_constant_regression_predictions_keep_their_correlation():
    """An undertrained STS-B regressor predicts nearly one value; the record must not round that away."""
    rng = np.random.default_rng(1)
    ref = np.round(rng.random(40) * 5, 2).tolist()
    pred = (2.5 + 1e-7 * (np.array(ref) + rng.normal(0, 2, 40))).tolist()
    record = per_example.classification(pred, ref, ["pearson", "spearman"])
    reported = compute_all(["pearson", "spearman"], pred, ref)
    for metric in ("pearson", "spearman"):
        assert observed(record, metric) == pytest.approx(reported[metric], rel=1e-9)
