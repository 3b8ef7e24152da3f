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


def test_an_evaluation_reads_each_record_once_and_judges_preconditions_reproducibly(scratch_root, monkeypatch):
    """One reader per evaluation: each record is read and checked once, by the preconditions too (a second
    reader would read and check them again, and could see files changed since). A precondition's interval
    is resampled with the evaluation's draws (raised where its level needs more, ``draws_for``) from a fixed
    seed: two evaluations print the same precondition, and the same part."""
    from collections import Counter

    from leanlm.claims import results as res
    from leanlm.claims import verdicts
    from leanlm.claims.report import evaluate_all
    from leanlm.claims.stats import draws_for
    from test_claims_preconditions import BASE, CLEAR_WIN, REFERENCE_ABOVE, _claims_file, _each_task_runs

    config, _ = _each_task_runs(scratch_root, failing=None)
    path = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_guarded", "pairs": CLEAR_WIN, "requires": ["reference_above"]},
    ], {"reference_above": REFERENCE_ABOVE})
    reads, resamples = Counter(), []
    read_record, bootstrap = res.read_record, verdicts.paired_bootstrap
    monkeypatch.setattr(res, "read_record", lambda p: reads.update([p]) or read_record(p))
    monkeypatch.setattr(verdicts, "paired_bootstrap",
                        lambda ms, effect, **kw: resamples.append(kw) or bootstrap(ms, effect, **kw))
    (first,) = evaluate_all(config, draws=300, claims_file=path)
    assert first.verdict == SUPPORTED and first.parts[0].checked[0].startswith("reference_above: supported (effect")
    assert len(reads) == 3 and set(reads.values()) == {1}, reads  # lsh_add, md5_add and the reference
    assert len(resamples) == 2 and all(kw["draws"] == draws_for(kw["level"], 300) for kw in resamples), resamples
    (second,) = evaluate_all(config, draws=300, claims_file=path)
    assert second.parts[0].checked == first.parts[0].checked and second.parts[0].interval == first.parts[0].interval


def test_one_reader_serves_every_part_and_every_claim(scratch_root, monkeypatch):
    """A ``tasks: each`` claim has one part per task, all reading the same two records; two such claims read
    them once in all (evaluate_all's reader), and a claim evaluated on its own builds one reader for its
    parts, not one per part."""
    from collections import Counter

    from leanlm.claims import results as res
    from leanlm.claims import spec, verdicts
    from leanlm.claims.report import evaluate_all
    from test_claims_preconditions import BASE, CLEAR_WIN, _claims_file, _each_task_runs

    config, tasks = _each_task_runs(scratch_root, failing=None)
    assert len(tasks) > 1
    each = {**BASE, "pairs": CLEAR_WIN, "tasks": "each"}
    path = _claims_file(scratch_root, [{**each, "id": "ch2_first"}, {**each, "id": "ch2_second"}])
    reads = Counter()
    read_record = res.read_record
    monkeypatch.setattr(res, "read_record", lambda p: reads.update([p]) or read_record(p))
    first, second = evaluate_all(config, draws=300, claims_file=path)
    assert len(first.parts) == len(second.parts) == len(tasks)
    assert len(reads) == 2 and set(reads.values()) == {1}, reads  # lsh_add's record and md5_add's
    reads.clear()
    claim = spec.load_claims(path)[0]
    alone = verdicts.evaluate_claim(claim, config, {"ch2_hashformers-lsh_add", "ch2_hashformers-md5_add"}, draws=300)
    assert [p.verdict for p in alone.parts] == [p.verdict for p in first.parts]
    assert len(reads) == 2 and set(reads.values()) == {1}, reads


@pytest.mark.parametrize("field, message", [
    ([1, [0, 1], 0], "per_example field 'prediction' of accuracy is not a list of numbers (one per example)"),
    ("0 1 0", "per_example field 'prediction' of accuracy is not a list of numbers (one per example)"),
    (7, "per_example field 'prediction' of accuracy is not a list of numbers (one per example)"),
    (None, "per_example of accuracy names field(s) ['prediction'] that its data lacks; the file was edited or "
           "damaged: rerun its job"),
])
def test_per_example_data_that_is_not_a_list_of_numbers_is_refused_naming_the_field(field, message):
    """What a damaged record can hold in a per-example field (a nested list, a string, a number, nothing) is
    refused naming the record, the metric and the field; a nested list reached numpy's own ValueError."""
    from leanlm.claims.results import _examples

    data = {"reference": [1, 0, 1]} if field is None else {"prediction": field, "reference": [1, 0, 1]}
    with pytest.raises(DataError) as err:
        _examples({"data": data}, "accuracy", {}, "accuracy", "runs/x/glue.json task sst2 seed 0")
    assert str(err.value).startswith("runs/x/glue.json task sst2 seed 0: " + message), str(err.value)


def test_unequal_or_empty_per_example_fields_are_refused_and_one_example_is_not():
    from leanlm.claims.results import _examples

    where = "runs/x/glue.json task sst2 seed 0"
    with pytest.raises(DataError) as err:
        _examples({"data": {"prediction": [1, 0, 1], "reference": [1, 0]}}, "accuracy", {}, "accuracy", where)
    assert str(err.value) == (f"{where}: the per-example fields of accuracy must hold one entry per evaluation example "
                              "each, but hold prediction 3, reference 2; the file was cut or edited: rerun its job")
    with pytest.raises(DataError, match="but hold prediction 0, reference 0;"):
        _examples({"data": {"prediction": [], "reference": []}}, "accuracy", {}, "accuracy", where)
    one = _examples({"data": {"prediction": [1], "reference": [1]}}, "accuracy", {}, "accuracy", where)
    assert {k: v.tolist() for k, v in one.items()} == {"prediction": [1], "reference": [1]}


def test_a_context_metric_resolves_to_the_longest_or_shortest_of_its_own_prefix():
    """``perplexity_ctx@max`` / ``@min``: the largest / smallest n among the record's ``perplexity_ctx<n>``
    metrics, compared as numbers (128 above 16), never another metric whose name happens to end in digits."""
    from leanlm.claims.results import Missing, resolve_metric

    results = [{"primary_metric": "word_perplexity", "metrics": {
        "perplexity_ctx16": 1.0, "perplexity_ctx128": 1.0, "perplexity_ctx32": 1.0, "word_perplexity": 1.0,
        "perplexity_ctxavg": 1.0, "perplexitywin_4096": 1.0}}]
    assert resolve_metric(results, "perplexity_ctx@max", "t") == "perplexity_ctx128"
    assert resolve_metric(results, "perplexity_ctx@min", "t") == "perplexity_ctx16"
    assert resolve_metric(results, "primary", "t") == "word_perplexity"
    assert resolve_metric(results, "perplexity_ctx32", "t") == "perplexity_ctx32"
    with pytest.raises(Missing, match="^wikitext has no bleu<n> metrics$"):
        resolve_metric(results, "bleu@max", "wikitext")


@pytest.mark.parametrize("checkpoints, expected", [
    ([{"bleu": 0.2}, {"bleu": 0.1}, {"bleu": 0.3}], (0.3, "the last checkpoint's bleu (of its checkpoints)")),
    ([{"bleu": 0.3}], (0.3, "the last checkpoint's bleu (of its checkpoints)")),            # one epoch averaged
    ([{"bleu": 0.2}, {"loss": 1.0}, {"bleu": 0.3}], (0.3, "the last checkpoint's bleu (of its checkpoints)")),
    (None, (0.25, "its stored bleu")),
    ([], (0.25, "its stored bleu")),
    ([{"bleu": 0.2}, {"loss": 1.0}], (0.25, "its stored bleu")),       # the last holds no BLEU
    ([{"bleu": 0.2}, 0.3], (0.25, "its stored bleu")),                 # not a checkpoint record
    ({"bleu": 0.3}, (0.25, "its stored bleu")),                        # not a list
])
def test_translation_data_is_checked_against_the_last_checkpoint_s_bleu(checkpoints, expected):
    """BLEU is the mean over the last epochs' checkpoints, and only the last checkpoint's sentences are kept: they
    are checked against that checkpoint's BLEU where the record has one, else against the stored metric."""
    from leanlm.claims.results import _per_example_target

    result = {"metrics": {"bleu": 0.25}} if checkpoints is None else {"metrics": {"bleu": 0.25}, "checkpoints": checkpoints}
    assert _per_example_target(result, "bleu", 0.25) == expected


@pytest.mark.parametrize("results, error", [
    (None, None),                                  # no "results" key: the task has no results, a Missing
    ([], None),
    (5, "its results must be a list of objects (one per task and seed), got int"),
    ([{"task": "sst2", "seed": 0}, 3], "its results must be a list of objects (one per task and seed), got a int in it"),
])
def test_a_record_whose_results_are_no_list_of_objects_is_refused_naming_it(scratch_root, results, error):
    """A damaged record's ``results`` (absent, empty, a number, a list holding a number): nothing for the task is
    "not run" (Missing); the others are refused naming the file, not a raw TypeError or AttributeError."""
    from leanlm.claims.results import Missing, Results
    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / "smoke.yaml")
    _write_run(scratch_root, config, REFERENCE, 0.8, tasks=["sst2"])
    path = scratch_root / "results" / "smoke" / "runs" / REFERENCE / "glue.json"
    doc = json.loads(path.read_text())
    if results is None:
        del doc["results"]
    else:
        doc["results"] = results
    path.write_text(json.dumps(doc))
    if error is None:
        with pytest.raises(Missing, match=f"^{REFERENCE} has no sst2 results in its glue record$"):
            Results(config).task_results(REFERENCE, "glue", "sst2")
    else:
        with pytest.raises(DataError) as err:
            Results(config).task_results(REFERENCE, "glue", "sst2")
        assert str(err.value) == f"{path}: {error}; the file was edited or damaged: rerun its job"


def test_a_seed_s_score_is_read_from_its_metrics_refusing_what_is_not_there_or_not_a_number(scratch_root):
    """One seed's stored metric: absent (or no metrics at all): Missing naming where; not a finite number or
    metrics that are no mapping: refused naming where and the metric; without per-example statistics (MultiRC's
    grouped F1a) the stored value alone, with its seed and evaluation set."""
    from leanlm.claims.results import Missing, Results
    from leanlm.config import load_config

    reader = Results(load_config(scratch_root / "params" / "smoke.yaml"))
    where = "runs/x/superglue.json task multirc seed 3"

    def read(result):
        return reader._seed_scores(result, "f1a", "superglue/multirc", where, "rerun it")

    scores = read({"seed": 3, "metrics": {"f1a": 0.61, "em": 0.2}})
    assert (scores.seed, scores.value, scores.eval_set, scores.examples) == (3, 0.61, "superglue/multirc", None)
    for result in ({"seed": 3, "metrics": {"em": 0.2}}, {"seed": 3}):
        with pytest.raises(Missing) as err:
            read(result)
        assert str(err.value) == f"{where} has no metric f1a"
    with pytest.raises(DataError) as err:
        read({"seed": 3, "metrics": {"f1a": float("nan")}})
    assert str(err.value) == (f"{where}: metric f1a = nan is not a finite number (a failed evaluation, or an edited "
                              "or damaged file); find the cause in the job's log and rerun the job")
    with pytest.raises(DataError) as err:
        read({"seed": 3, "metrics": ["f1a"]})
    assert str(err.value).startswith(f"{where}: its metrics must be an object of metric values, got list")


def test_stored_metrics_are_checked_against_their_per_example_data_within_the_stated_tolerance(scratch_root):
    """The record check of one seed: a stored metric equal to its recomputation to 1e-6 relative, or 1e-9 absolute
    near 0, is read; one further off is refused naming where, what and the command to rerun; an unknown statistic
    and a non-finite checkpoint BLEU are refused naming where."""
    from leanlm.claims.results import Results
    from leanlm.config import load_config
    from leanlm.errors import LeanLMError
    from leanlm.evaluation import per_example

    reader = Results(load_config(scratch_root / "params" / "smoke.yaml"))
    where, rerun = "runs/x/squad.json task squad_v1 seed 0", "`leanlm finetune ...`"

    def read(scores, stored, statistic="mean", **extra):
        pe = per_example.scores({"f1": scores}, {"squad_f1": [statistic, {"score": "f1"}]})
        return reader._seed_scores({"seed": 0, "metrics": {"squad_f1": stored}, "per_example": pe, **extra},
                                   "squad_f1", "squad/squad_v1", where, rerun)

    scores = [0.25, 0.5, 1.0, 0.75]
    kept = read(scores, 0.625 * (1 + 5e-7))  # within 1e-6 relative (3e-7 absolute: beyond the 1e-9 floor)
    assert (kept.seed, kept.value, kept.statistic, kept.eval_set) == (0, 0.625 * (1 + 5e-7), "mean", "squad/squad_v1")
    assert kept.examples["score"].tolist() == scores
    assert read([2e-10, 0.0], 0.0).value == 0.0  # near 0: the absolute floor
    with pytest.raises(DataError) as err:
        read(scores, 0.625 * (1 + 2e-6))
    assert str(err.value).startswith(f"{where}: squad_f1 recomputed from its per-example data is 0.625, but its "
                                     f"stored squad_f1 is {0.625 * (1 + 2e-6)!r}: the data or the metric was changed")
    assert str(err.value).endswith(f"Rerun the job ({rerun})")
    with pytest.raises(DataError) as err:
        reader._seed_scores({"seed": 0, "metrics": {"squad_f1": 0.625}, "per_example": {
            "statistics": {"squad_f1": ["mean", {"score": "f1"}]}, "data": {}}}, "squad_f1", "squad/squad_v1", where, rerun)
    assert str(err.value).startswith(f"{where}: per_example of squad_f1 names field(s) ['f1'] that its data lacks")
    with pytest.raises(LeanLMError) as err:
        read(scores, 0.625, statistic="mode")
    assert str(err.value) == f"{where}: per_example statistic 'mode' of squad_f1 is unknown"
    with pytest.raises(DataError) as err:
        read(scores, 0.625, checkpoints=[{"squad_f1": 0.6}, {"squad_f1": float("nan")}])
    assert str(err.value).startswith(f"{where}: the last checkpoint's squad_f1 (of its checkpoints) = nan is not a "
                                     "finite number")
