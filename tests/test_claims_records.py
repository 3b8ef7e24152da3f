"""How the claims read a run's record (leanlm.claims.results): each record once, by one reader for every
part and claim; its per-example data (numbers, one per example, in every field), a context metric's
resolution, translation's checkpoint check, a results list and a seed's metrics, the stored metric against
its per-example data; each damaged record refused naming where and what is wrong."""

from __future__ import annotations

import json

import pytest

from leanlm.claims.stats import SUPPORTED
from leanlm.errors import DataError
from test_claims import _write_run
from test_claims_results import REFERENCE, _config, _results


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
