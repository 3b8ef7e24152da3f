"""What the claims read beside the runs' scores (docs/mutation-testing.md, issue 27): ch. 4's Rnd. Guess / Majority
rows from results/<profile>/baselines/lm_eval.json as aggregation writes it, a fine-tuning task's Majority row from
the dev labels its run kept, whether a run's predictions vary (a precondition of its own kind), and the end-of-run
sentence on what a profile's scale lets its verdicts say. Each error path is checked for the words that say what
is wrong and where."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from leanlm.claims.stats import CONTRADICTED, INCONCLUSIVE, NOT_RUN, SUPPORTED, UNTESTABLE
from leanlm.errors import DataError
from test_claims import _write_run

REFERENCE = "ch2_hashformers-bert_mlm"  # the run ch. 2's GLUE preconditions read


def _config(root, name="smoke"):
    from leanlm.config import load_config

    return load_config(root / "params" / f"{name}.yaml")


def _results(config):
    from leanlm.claims.results import Results

    return Results(config)


# --------------------------------------------------------------------------- ch. 4's rows (lm_eval)
ARC_DOCS = [{"choices": ["a", "b", "c", "d"], "label": 0}, {"choices": ["a", "b", "c", "d"], "label": 0},
            {"choices": ["yes", "no"], "label": 1}]  # random guess (1/4 + 1/4 + 1/2) / 3, majority 2/3 (gold index 0)
VOCAB = 1000  # a tokenizer of one token per word: a uniform guess has word perplexity VOCAB


def _write_baselines(root, config) -> Path:
    """An lm_eval run's record with the rows its evaluation computed (leanlm.lm_eval.baselines), collected into
    results/<profile>/baselines/lm_eval.json by aggregation's own function."""
    from claims_world import _OneTokenPerWord
    from leanlm.io import write_json
    from leanlm.lm_eval.baselines import random_guess_and_majority
    from leanlm.reporting.aggregate import collect_baselines

    pages = [{"page": "one two three"}, {"page": "four five"}]
    rows = {"lm_eval_arc_easy": random_guess_and_majority(ARC_DOCS),
            "lm_eval_wikitext": random_guess_and_majority(pages, _OneTokenPerWord(VOCAB))}
    run_id = "ch4_uniform-standard"
    write_json(root / "results" / config["profile"] / "runs" / run_id / "lm_eval.json",
               {"profile": config["profile"], "run_id": run_id, "family": "lm_eval",
                "results": [{"task": task, "lm_eval_task": task.removeprefix("lm_eval_"), "thesis_name": task,
                             "baselines": {**row, "split": "test"}} for task, row in rows.items()]})
    return collect_baselines(config["profile"])


def test_ch4_rows_are_read_from_the_baselines_aggregation_writes(scratch_root):
    config = _config(scratch_root)
    path = _write_baselines(scratch_root, config)
    assert path == scratch_root / "results" / "smoke" / "baselines" / "lm_eval.json"
    reader = _results(config)
    # family lm_eval is the default: ch. 4's rows
    assert reader.baseline_value("random_guess", "lm_eval_arc_easy", "acc") == pytest.approx(1 / 3)
    assert reader.baseline_value("majority", "lm_eval_arc_easy", "acc_norm", family="lm_eval") == pytest.approx(2 / 3)
    assert reader.baseline_value("random_guess", "lm_eval_wikitext", "word_perplexity") == pytest.approx(VOCAB)


def test_ch4_rows_that_do_not_exist_are_missing_naming_them(scratch_root):
    from leanlm.claims.results import Missing

    config = _config(scratch_root)
    reader = _results(config)
    path = scratch_root / "results" / "smoke" / "baselines" / "lm_eval.json"
    with pytest.raises(Missing) as err:  # aggregation wrote none: the profile has no lm_eval results
        reader.baseline_value("majority", "lm_eval_arc_easy", "acc")
    assert str(err.value) == f"no baseline rows ({path}); the profile runs no lm_eval family"
    _write_baselines(scratch_root, config)
    reader = _results(config)
    with pytest.raises(Missing) as err:  # a task no lm_eval run evaluated
        reader.baseline_value("majority", "lm_eval_boolq", "acc")
    assert str(err.value) == f"no baseline row for task lm_eval_boolq in {path}"
    with pytest.raises(Missing) as err:  # WikiText has no Majority row (the thesis prints "-")
        reader.baseline_value("majority", "lm_eval_wikitext", "word_perplexity")
    assert str(err.value) == "lm_eval_wikitext has no majority row for word_perplexity (the thesis prints none)"
    with pytest.raises(Missing) as err:  # the row is named as printed: "random guess"
        reader.baseline_value("random_guess", "lm_eval_arc_easy", "word_perplexity")
    assert str(err.value) == "lm_eval_arc_easy has no random guess row for word_perplexity (the thesis prints none)"


@pytest.mark.parametrize("edit, message", [
    (lambda doc: doc.update(profile="signal"), "written by profile 'signal' but read as profile 'smoke'"),
    (lambda doc: doc["tasks"]["lm_eval_arc_easy"]["majority"].update(acc=None),
     "task lm_eval_arc_easy: majority acc = None is not a finite number"),
])
def test_a_baselines_file_of_another_profile_or_damaged_is_refused_naming_it(scratch_root, edit, message):
    config = _config(scratch_root)
    path = _write_baselines(scratch_root, config)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        _results(config).baseline_value("majority", "lm_eval_arc_easy", "acc")
    assert str(err.value).startswith(f"{path}") and message in str(err.value)


# --------------------------------------------------------------------------- fine-tuning Majority rows
def test_a_fine_tuning_majority_row_comes_from_the_runs_dev_labels_and_no_other_row_exists(scratch_root):
    from collections import Counter

    from sklearn.metrics import f1_score

    from leanlm.claims.results import Missing

    config = _config(scratch_root)
    _write_run(scratch_root, config, REFERENCE, 0.8, tasks=["sst2"])
    _write_run(scratch_root, config, REFERENCE, 0.7, family="superglue", tasks=["cb"])
    reader = _results(config)
    ref = reader.task_results(REFERENCE, "glue", "sst2")[0]["per_example"]["data"]["reference"]
    assert reader.baseline_value("majority", "sst2", "accuracy", family="glue", run_id=REFERENCE) == \
        pytest.approx(Counter(ref).most_common(1)[0][1] / len(ref))
    # CB's macro F1 (registered with the SuperGLUE metrics): always the most frequent class, as scikit-learn scores it
    ref = reader.task_results(REFERENCE, "superglue", "cb")[0]["per_example"]["data"]["reference"]
    major = Counter(ref).most_common(1)[0][0]
    assert reader.majority_value(REFERENCE, "superglue", "cb", "macro_f1") == \
        pytest.approx(f1_score(ref, [major] * len(ref), average="macro"))
    for which, run_id in (("random_guess", REFERENCE), ("majority", None), ("random_guess", None)):
        with pytest.raises(Missing) as err:
            reader.baseline_value(which, "sst2", "accuracy", family="glue", run_id=run_id)
        assert str(err.value) == (f"glue has no {which.replace('_', ' ')} row (only Majority, from a run's dev "
                                  "labels)")


def test_a_run_keeping_no_dev_labels_has_no_majority_row_and_says_where(scratch_root):
    """Results without per-example data (MultiRC's grouped metrics keep none; here an older file)."""
    from leanlm.claims.results import Missing

    config = _config(scratch_root)
    _write_run(scratch_root, config, REFERENCE, 0.8, seeds=(0, 1), tasks=["sst2"])
    path = scratch_root / "results" / "smoke" / "runs" / REFERENCE / "glue.json"
    doc = json.loads(path.read_text())
    doc["results"][1].pop("per_example")  # one seed without: the other's labels still give the row
    path.write_text(json.dumps(doc))
    reader = _results(config)
    assert reader.keeps_labels(REFERENCE, "glue", "sst2", "accuracy")
    assert reader.constant_prediction(REFERENCE, "glue", "sst2", "accuracy") is None
    doc["results"][0].pop("per_example")
    path.write_text(json.dumps(doc))
    reader = _results(config)
    assert not reader.keeps_labels(REFERENCE, "glue", "sst2", "accuracy")
    for read in (reader.majority_value, reader.constant_prediction):
        with pytest.raises(Missing) as err:
            read(REFERENCE, "glue", "sst2", "accuracy")
        assert str(err.value) == (f"{path} task sst2 keeps no per-example predictions and references of accuracy, so "
                                  "its Majority row and whether its predictions vary cannot be computed")


# --------------------------------------------------------------------------- "its predictions vary"
def _varies_part():
    """The shipped precondition ch2_glue_reference_predictions_vary, as a ch. 2 GLUE claim holds it."""
    from leanlm.claims.spec import load_claims

    claim = next(c for c in load_claims() if c.id == "ch2_emb_1k_far_below_compressed")
    (cond,) = [c for c in claim.parts[0].conditions if c.kind == "varies"]
    return cond.part


def _vary(config, tasks, part=None, profile_runs=None):
    from leanlm.claims.verdicts import _predictions_vary
    from leanlm.runs import runs

    if profile_runs is None:
        profile_runs = {run.run_id: frozenset(run.finetune) for run in runs(config)}
    return _predictions_vary(part or _varies_part(), config, profile_runs, tasks, _results(config))


def _constant(values):
    """Predictions of one value per (seed, task) in the order _write_run makes them: seed by seed, task by task."""
    it = iter(values)
    return lambda spec, ref: [next(it)] * len(ref)


def _expected(verdict, reason, tasks=("sst2", "rte"), part=None):
    from leanlm.claims.verdicts import PartResult

    return PartResult(part or _varies_part(), f"{REFERENCE}'s predictions on glue ({', '.join(tasks)})", verdict,
                      reason=reason)


def test_predictions_that_vary_on_each_task_read_support_the_precondition(scratch_root):
    config = _config(scratch_root)
    # one class on QNLI, which the part does not read here: only the tasks it is given count
    _write_run(scratch_root, config, REFERENCE, 0.8, tasks=["sst2", "rte", "qnli"],
               predict=lambda spec, ref: [1] * len(ref) if spec.name == "qnli" else ref)
    assert _vary(config, ["sst2", "rte"]) == _expected(SUPPORTED, f"{REFERENCE}'s predictions vary on every task")
    assert _vary(config, ["qnli"]).verdict == CONTRADICTED


@pytest.mark.parametrize("seeds, per_seed_task, constant", [
    ((0,), [0, 1], "sst2 (always 0), rte (always 1)"),  # one seed, one value on each task
    ((0, 1), [0, 1, 0, 1], "sst2 (always 0), rte (always 1)"),  # every seed the same value on each task
    ((0, 1), [0, 1, 1, 1], "rte (always 1)"),  # sst2 answers 0, then 1: only rte is one value over its seeds
    ((0, 1), [0, 1, 1, 0], None),  # each seed constant, but no task one value over its seeds
])
def test_one_value_for_every_example_of_every_seed_contradicts_naming_each_task_and_value(
        scratch_root, seeds, per_seed_task, constant):
    config = _config(scratch_root)
    _write_run(scratch_root, config, REFERENCE, 0.8, seeds=seeds, tasks=["sst2", "rte"], predict=_constant(per_seed_task))
    expected = (_expected(CONTRADICTED, f"{REFERENCE} predicts one value for every example of {constant}") if constant
                else _expected(SUPPORTED, f"{REFERENCE}'s predictions vary on every task"))
    assert _vary(config, ["sst2", "rte"]) == expected


def test_predictions_that_cannot_be_read_leave_the_precondition_not_run_saying_why(scratch_root):
    config = _config(scratch_root)
    path = scratch_root / "results" / "smoke" / "runs" / REFERENCE / "glue.json"
    # no results: the reader's Missing is the reason
    assert _vary(config, ["sst2", "rte"]) == _expected(NOT_RUN, f"no results of {REFERENCE} on glue ({path})")
    _write_run(scratch_root, config, REFERENCE, 0.8, tasks=["sst2", "rte"], predict=_constant([0, 0]))
    # a run the profile does not run: not run, whatever is on disk (here: constant predictions)
    others = {run_id: families for run_id, families in _profile_runs(config).items() if run_id != REFERENCE}
    assert _vary(config, ["sst2", "rte"], profile_runs=others) == _expected(
        NOT_RUN, f"not run at this profile: {REFERENCE}")
    # a metric the task lacks (the longest of a prefix that has none)
    part = replace(_varies_part(), metric="perplexity_ctx@max")
    assert _vary(config, ["sst2", "rte"], part=part) == _expected(
        NOT_RUN, "sst2 has no perplexity_ctx<n> metrics", part=part)
    # no dev labels kept
    doc = json.loads(path.read_text())
    for result in doc["results"]:
        result.pop("per_example")
    path.write_text(json.dumps(doc))
    assert _vary(config, ["sst2", "rte"]) == _expected(
        NOT_RUN, f"{path} task sst2 keeps no per-example predictions and references of accuracy, so its Majority row "
                 "and whether its predictions vary cannot be computed")


def _profile_runs(config):
    from leanlm.runs import runs

    return {run.run_id: frozenset(run.finetune) for run in runs(config)}


def test_a_part_with_a_baseline_on_both_sides_has_no_run_to_read_labels_from(scratch_root):
    from leanlm.claims.results import Missing
    from leanlm.claims.spec import load_claims
    from leanlm.claims.verdicts import _Sides

    claim = next(c for c in load_claims() if c.id == "ch2_emb_1k_far_below_compressed")
    above = next(c for c in claim.parts[0].conditions if c.name == "ch2_glue_reference_above_majority").part
    config = _config(scratch_root)
    _write_run(scratch_root, config, REFERENCE, 0.8, tasks=["sst2"])
    sides = _Sides(_results(config), above, ["sst2"])
    _, lower = sides.side(above.b)  # side B's Majority row, from side A's run's labels
    assert lower is False
    both = replace(above, a=above.b)
    with pytest.raises(Missing) as err:
        _Sides(_results(config), both, ["sst2"]).side(both.b)
    assert str(err.value) == "a part needs at least one run"


# --------------------------------------------------------------------------- what a profile's scale lets it say
COUNTS = {SUPPORTED: 3, CONTRADICTED: 2, INCONCLUSIVE: 4, UNTESTABLE: 5, NOT_RUN: 6}


def test_the_scale_sentence_says_what_the_verdicts_are_findings_about(scratch_root):
    from leanlm.claims.report import scale_sentence

    assert scale_sentence(_config(scratch_root), COUNTS) == (
        "profile smoke runs below the thesis's scale: its 5 supported or contradicted claims are findings about its "
        "small models, not about the thesis, and 5 cannot be tested here at all (docs/claims.md)")
    assert scale_sentence(_config(scratch_root, "paper"), COUNTS) == (
        "profile paper runs at the thesis's scale: 5 claims judged, 4 inconclusive, 5 untestable (docs/claims.md)")
