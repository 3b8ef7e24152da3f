"""Per-example evaluation data kept in a run's results, so a claim's interval can resample examples.

Every (task, seed) result may carry

    "per_example": {"data": {field: [...]}, "statistics": {metric: [statistic, {role: field}]}}

``data`` holds equal-length lists, one entry per evaluation example, in the evaluation set's order
(the same order for every model, which is what pairs the comparison); ``statistics`` says which
function of which fields gives each metric (``mean`` of a ``score``; ``perplexity`` from ``nll`` and
``units``; ``bleu`` from per-sentence n-gram statistics; or a metric recomputed from ``prediction`` and
``reference``: accuracy, f1, macro_f1, matthews, pearson, spearman; see leanlm.claims.stats). Kept by
the GLUE/SuperGLUE runner (dev predictions), SQuAD (per-question F1/EM), the perplexity runner
(per-window NLL and tokens), translation (per-sentence BLEU statistics) and lm-eval (its logged
per-document scores). Metrics it does not list (MultiRC's per-question scores) are resampled at the
seed level only. Kept compact: integers as integers, floats exact.
"""

from __future__ import annotations

from typing import Iterable, Sequence

# Metrics recomputable from one prediction and one reference per example.
RECOMPUTABLE = ("accuracy", "f1", "macro_f1", "matthews", "pearson", "spearman")


def _compact(values: Sequence) -> list:
    out = []
    for v in values:
        if isinstance(v, bool):
            out.append(int(v))
        elif isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 2**53):
            out.append(int(v))
        else:
            # Unrounded (JSON keeps the shortest exact repr): an undertrained regressor's predictions may
            # differ only in the 7th digit, and rounding them changes its correlation.
            out.append(float(v))
    return out


def classification(predictions: Sequence, references: Sequence, metrics: Iterable[str]) -> dict | None:
    """Predictions and references of a classification or regression evaluation, for the metrics that
    are a function of them alone (None when the task has none: grouped metrics only)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    statistics = {m: [m, {}] for m in metrics if m in RECOMPUTABLE}
    if not statistics or not predictions:
        return None
    return {"data": {"prediction": _compact(predictions), "reference": _compact(references)},
            "statistics": statistics}


def scores(fields: dict[str, Sequence], statistics: dict[str, list]) -> dict | None:
    """Named per-example fields (correctness, log-likelihoods, units) and the statistic of each metric."""
    lengths = {len(v) for v in fields.values()}
    if not fields or not statistics or len(lengths) != 1 or 0 in lengths:
        return None
    return {"data": {k: _compact(v) for k, v in fields.items()}, "statistics": statistics}


def lm_eval(documents: Sequence[dict]) -> dict | None:
    """lm-eval's per-document metric values (run_lm_eval's ``samples``) as per-example data: accuracies
    as 0/1 scores; word/byte perplexity from each document's log-likelihood and word/byte count;
    LAMBADA's perplexity from each continuation's log-likelihood (one unit each)."""
    if not documents:
        return None
    fields: dict[str, list] = {}
    statistics: dict[str, list] = {}
    for metric in documents[0]:
        values = [d[metric] for d in documents]
        if metric in ("acc", "acc_norm"):
            fields[metric] = [float(v) for v in values]
            statistics[metric] = ["mean", {"score": metric}]
        elif metric in ("word_perplexity", "byte_perplexity") and all(isinstance(v, (list, tuple)) for v in values):
            unit = "words" if metric == "word_perplexity" else "bytes"
            fields["nll"] = [-float(v[0]) for v in values]
            fields[unit] = [float(v[1]) for v in values]
            statistics[metric] = ["perplexity", {"nll": "nll", "units": unit}]
        elif metric == "perplexity" and all(isinstance(v, (int, float)) for v in values):
            fields["continuation_nll"] = [-float(v) for v in values]
            fields["one"] = [1] * len(values)
            statistics[metric] = ["perplexity", {"nll": "continuation_nll", "units": "one"}]
    return scores(fields, statistics) if statistics else None


def span_qa(answers: Sequence[str], golds: Sequence[Sequence[str]], metrics: Iterable[str]) -> dict | None:
    """SQuAD: each question's best F1 and exact match over its gold answers (the metrics are their means)."""
    from leanlm.evaluation.squad import best_over_golds, exact_match_score, f1_score

    if len(answers) != len(golds):
        raise ValueError(f"{len(answers)} answers for {len(golds)} questions")
    per_question = {"squad_f1": ("f1", f1_score), "squad_em": ("em", exact_match_score)}
    wanted = [m for m in metrics if m in per_question]
    fields = {per_question[m][0]: [best_over_golds(per_question[m][1], str(a), g) for a, g in zip(answers, golds)]
              for m in wanted}
    return scores(fields, {m: ["mean", {"score": per_question[m][0]}] for m in wanted}) if wanted else None
