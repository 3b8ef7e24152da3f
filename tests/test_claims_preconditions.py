"""Untestable is a verdict of its own (issue 27, item 2): a part whose precondition fails at a profile, or
whose interval has no width, is "untestable at this scale" with the reason, and never counts as supported
or contradicted. The cases the issue found: every ch. 4 model scores LAMBADA 0 (a [0, 0] interval called a
claim contradicted), collapsed models made equivalence claims "supported", models at chance made
"far below" claims "contradicted"."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from leanlm.claims.spec import load_claims
from leanlm.claims.stats import (CONTRADICTED, INCONCLUSIVE, NOT_RUN, SUPPORTED, UNTESTABLE, Interval, combine,
                                 verdict)
from leanlm.errors import ConfigError
from test_claims import BASE, _write_run


def _claims_file(root, claims, preconditions=None):
    path = root / "params" / "test_claims.yaml"
    doc = {"claims": claims} if preconditions is None else {"preconditions": preconditions, "claims": claims}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


REGIME = {"a": "{experiment}-lsh_pool", "b": "{experiment}-md5_pool", "test": "better",
          "reason": "The reference must beat the weaker model on this benchmark before the claim can be judged."}


def _config(root):
    from leanlm.config import load_config

    return load_config(root / "params" / "smoke.yaml")


def _evaluate(root, path):
    from leanlm.claims.report import evaluate_all

    return evaluate_all(_config(root), draws=300, claims_file=path)


def _evaluate_with(config, path):
    from leanlm.claims.report import evaluate_all

    return evaluate_all(config, draws=300, claims_file=path)


def test_a_failed_precondition_makes_the_part_untestable_with_its_reason(scratch_root):
    config = _config(scratch_root)
    tasks = config["finetune"]["glue"]["tasks"]
    _write_run(scratch_root, config, "ch2_hashformers-lsh_pool", 0.85, tasks=tasks)
    _write_run(scratch_root, config, "ch2_hashformers-md5_pool", 0.60, tasks=tasks)
    _write_run(scratch_root, config, "ch2_hashformers-lsh_add", 0.85, tasks=tasks)
    _write_run(scratch_root, config, "ch2_hashformers-md5_add", 0.55, tasks=tasks)
    clear_win = [["ch2_hashformers-lsh_add", "ch2_hashformers-md5_add"]]
    path = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_judged", "pairs": clear_win, "requires": ["pool_in_regime"]},
        {**BASE, "id": "ch2_not_judged", "pairs": clear_win, "requires": ["pool_reversed"]},
        {**BASE, "id": "ch2_loss_not_judged", "pairs": [list(reversed(clear_win[0]))], "requires": ["pool_reversed"]},
    ], {"pool_in_regime": REGIME,
        "pool_reversed": {**REGIME, "a": "{experiment}-md5_pool", "b": "{experiment}-lsh_pool"}})
    judged, not_judged, loss = _evaluate(scratch_root, path)
    assert judged.verdict == SUPPORTED
    assert judged.parts[0].checked[0].startswith("pool_in_regime: supported (effect")
    for result in (not_judged, loss):  # a clear win and a clear loss alike: neither counts
        assert result.verdict == UNTESTABLE and result.parts[0].interval is None
        reason = result.parts[0].reason
        assert reason.startswith("untestable at this scale: The reference must beat the weaker model")
        assert "Precondition pool_reversed (ch2_hashformers-md5_pool vs ch2_hashformers-lsh_pool on glue) is contradicted" in reason


def test_a_zero_width_interval_is_never_a_verdict(scratch_root):
    """Both models wrong on every example: the interval is [0, 0], which says nothing."""
    for run_id in ("ch2_hashformers-lsh_proj", "ch2_hashformers-md5_proj"):
        _write_run(scratch_root, _config(scratch_root), run_id, 0.0, tasks=["sst2"])
    path = _claims_file(scratch_root, [{**BASE, "id": "ch2_both_at_zero", "tasks": ["sst2"], "metric": "accuracy",
                                        "pairs": [["ch2_hashformers-lsh_proj", "ch2_hashformers-md5_proj"]]}])
    (result,) = _evaluate(scratch_root, path)
    part = result.parts[0]
    assert (part.a, part.b) == (0.0, 0.0) and part.interval.low == part.interval.high == 0.0
    assert part.verdict == UNTESTABLE and result.verdict == UNTESTABLE
    assert part.reason == ("untestable at this scale: every resample gives the same effect (a zero-width interval, "
                           "e.g. both sides score 0 on every example), which is no evidence either way")


def test_the_report_shows_untestable_parts_and_their_preconditions(scratch_root, capsys):
    from leanlm.claims.report import main, print_summary

    for run_id, rate in (("ch2_hashformers-lsh_pool", 0.6), ("ch2_hashformers-md5_pool", 0.85),
                         ("ch2_hashformers-lsh_add", 0.85), ("ch2_hashformers-md5_add", 0.55)):
        _write_run(scratch_root, _config(scratch_root), run_id, rate, tasks=["sst2"])
    path = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_not_judged", "tasks": ["sst2"], "pairs": [["ch2_hashformers-lsh_add", "ch2_hashformers-md5_add"]],
         "requires": ["pool_in_regime"]}], {"pool_in_regime": REGIME})
    main(_config(scratch_root), draws=200, claims_file=path)
    table = scratch_root / "paper_tables" / "smoke"
    row = pd.read_csv(table / "claims.csv").iloc[0]
    assert row["verdict"] == UNTESTABLE and row["preconditions"].startswith("pool_in_regime: contradicted")
    assert "on glue (sst2)" in row["comparison"]  # a part names its task
    md = (table / "claims.md").read_text()
    assert "## ch2_not_judged: **untestable**" in md and "untestable at this scale: The reference must" in md
    tex = (table / "claims.tex").read_text()
    assert r"untest." in tex
    # tables.pdf names what each verdict rests on: here the precondition that failed
    assert r"precondition pool\_in\_regime fails" in tex
    capsys.readouterr()
    print_summary("smoke")
    assert "0 supported, 0 contradicted, 0 inconclusive (95% interval too wide at this scale), 1 untestable" \
        in capsys.readouterr().out
    # The end of a run: each claim with the part its verdict rests on, and what the profile's scale can test.
    print_summary("smoke", _config(scratch_root))
    out = capsys.readouterr().out
    assert "ch2_not_judged  untestable    part 1/1: precondition pool_in_regime fails" in out
    assert "profile smoke runs below the thesis's scale: its 0 supported or contradicted claims are findings about " \
           "its small models, not about the thesis, and 1 cannot be tested here at all" in out


@pytest.mark.parametrize("verdicts, quantifier, expected", [
    ([SUPPORTED, UNTESTABLE], "every", INCONCLUSIVE),      # "every" cannot be shown with a part unjudged
    ([CONTRADICTED, UNTESTABLE], "every", CONTRADICTED),   # a judged counterexample still refutes it
    ([UNTESTABLE, UNTESTABLE, NOT_RUN], "every", UNTESTABLE),
    ([SUPPORTED, SUPPORTED, UNTESTABLE], "most", SUPPORTED),
    ([SUPPORTED, UNTESTABLE, UNTESTABLE], "most", INCONCLUSIVE),  # untestable parts count against "most"
    ([NOT_RUN], "every", NOT_RUN),
])
def test_untestable_parts_count_neither_way(verdicts, quantifier, expected):
    assert combine(verdicts, quantifier) == expected


def test_a_degenerate_interval_is_untestable_but_nothing_resampled_is_inconclusive():
    flat = Interval(estimate=0.0, low=0.0, high=0.0, level=0.95, draws=100, basis="examples")
    assert verdict(flat, (0.0, float("inf"))) == UNTESTABLE
    assert verdict(Interval(0.0, 0.0, 0.0, 0.95, 0, "none"), (0.0, float("inf"))) == INCONCLUSIVE
    assert verdict(Interval(3.0, 2.0, 4.0, 0.95, 100, "examples"), (0.0, float("inf"))) == SUPPORTED


@pytest.mark.parametrize("change, message", [
    ({"requires": ["nowhere"]}, r"requires .nowhere., which is not among the file.s preconditions \(pool_in_regime\)"),
])
def test_a_claim_naming_an_unknown_precondition_fails_loudly(scratch_root, change, message):
    path = _claims_file(scratch_root, [{**BASE, "id": "ch2_bad", "pairs": [["ch2_hashformers-lsh_add",
                                                                           "ch2_hashformers-md5_add"]], **change}],
                        {"pool_in_regime": REGIME})
    with pytest.raises(ConfigError, match=message):
        load_claims(path)


@pytest.mark.parametrize("preconditions, listed", [
    ({"pool_in_regime": REGIME, "add_in_regime": REGIME}, "add_in_regime, pool_in_regime"), (None, "none")])
def test_an_unknown_precondition_is_refused_listing_the_file_s_own(scratch_root, preconditions, listed):
    path = _claims_file(scratch_root, [{**BASE, "id": "ch2_bad", "pairs": CLEAR_WIN, "requires": ["nowhere"]}],
                        preconditions)
    with pytest.raises(ConfigError) as err:
        load_claims(path)
    assert str(err.value) == (f"{path}: claim ch2_bad, part 1: requires 'nowhere', which is not among the file's "
                              f"preconditions ({listed})")


def test_a_precondition_that_cannot_be_built_is_refused_naming_its_claim_and_part(scratch_root):
    path = _claims_file(scratch_root, [{**BASE, "id": "ch2_bad", "requires": ["b_reference"],
                                        "parts": [{"a": "ch2_hashformers-lsh_add", "b": {"baseline": "majority"}}]}],
                        {"b_reference": {**REGIME, "b": "{experiment_b}-md5_pool"}})
    with pytest.raises(ConfigError) as err:
        load_claims(path)
    assert str(err.value) == (f"{path}: claim ch2_bad, part 1: precondition b_reference names "
                              "'{experiment_b}-md5_pool', but the part has no run on side B to take the experiment from")


def test_a_precondition_naming_an_unknown_run_fails_loudly(scratch_root):
    path = _claims_file(scratch_root, [{**BASE, "id": "ch2_bad", "pairs": [["ch2_hashformers-lsh_add",
                                                                           "ch2_hashformers-md5_add"]],
                                        "requires": ["typo"]}],
                        {"typo": {**REGIME, "a": "{experiment}-lsh_poool"}})
    with pytest.raises(ConfigError) as err:
        load_claims(path)
    assert str(err.value).startswith(f"{path}: claim ch2_bad, part 1, precondition typo: unknown run "
                                     "'ch2_hashformers-lsh_poool'; runs of the experiment matrix")


def test_the_shipped_claims_guard_what_the_issue_lists():
    """The preconditions of params/claims.yaml: ch. 4 perplexity claims need the regime, NLU claims a
    reference above Majority, LAMBADA claims accuracy above 0, MHE claims MHA above SHA (on the part's own
    benchmark, in the part's own experiment)."""
    claims = {c.id: c for c in load_claims()}
    names = lambda cid: {cond.name for p in claims[cid].parts for cond in p.conditions}  # noqa: E731
    assert names("ch4_skip_perplexity_explodes") == {"ch4_lm_in_regime"}
    assert names("ch4_hybrids_match_standard") == {"ch4_lm_in_regime", "ch4_nlu_above_majority"}
    assert names("ch4_static_emb_qk_beats_fixed_patterns_on_lambada") == {"ch4_lambada_above_zero"}
    assert names("ch4_uniform_mlp_near_random_nlu") == {"ch4_nlu_above_majority"}
    for part in claims["ch3_mhe_above_sha_everywhere"].parts:
        (cond,) = part.conditions
        experiment = part.a.runs[0].split("-")[0]
        assert cond.part.a.runs == (f"{experiment}-mha",) and cond.part.b.runs == (f"{experiment}-sha",)
        assert (cond.part.family, cond.part.tasks) == (part.family, part.tasks)
    for part in claims["ch4_hybrids_match_standard"].parts:
        (cond,) = part.conditions
        assert cond.name == ("ch4_lm_in_regime" if part.metric == "word_perplexity" else "ch4_nlu_above_majority")


# --------------------------------------------------------------------------- ch. 2's GLUE reference
CH2_GLUE_CLAIMS = ["ch2_lsh_beats_md5_compressed", "ch2_md5_emb_at_least_lsh_emb", "ch2_emb_1k_far_below_compressed",
                   "ch2_lsh_proj_near_bert_mlm", "ch2_proformer_far_below_pretrained"]


def _shipped(root, claim_id):
    """params/claims.yaml with its preconditions and one claim."""
    doc = yaml.safe_load((root / "params" / "claims.yaml").read_text())
    doc["claims"] = [c for c in doc["claims"] if c["id"] == claim_id]
    path = root / "params" / "test_claims.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_ch2_glue_claims_need_bert_mlm_above_majority_by_their_margin_with_varying_predictions():
    claims = {c.id: c for c in load_claims()}
    for cid in CH2_GLUE_CLAIMS:
        for part in claims[cid].parts:
            conds = {c.name: c for c in part.conditions}
            assert set(conds) == {"ch2_glue_reference_above_majority", "ch2_glue_reference_predictions_vary"}, cid
            above = conds["ch2_glue_reference_above_majority"].part
            assert above.a.runs == ("ch2_hashformers-bert_mlm",) and above.b.baseline == "majority"
            assert above.region[0] == (part.margin or 0.0)  # at least the claim's own margin
            assert conds["ch2_glue_reference_predictions_vary"].part.a.runs == ("ch2_hashformers-bert_mlm",)


def _one_class(spec, ref):
    return [max(set(ref), key=ref.count)] * len(ref) if spec.label_kind != "regression" else [2.5] * len(ref)


def _one_class_on_qnli(spec, ref):
    """Right on every example, except QNLI, where it answers one class: far above Majority on average."""
    return _one_class(spec, ref) if spec.name == "qnli" else ref


@pytest.mark.parametrize("reference, expected, why", [
    (dict(rate=0.9), CONTRADICTED, None),  # in the regime: the claim is judged (both at chance: not 5 points apart)
    (dict(rate=0.9, predict=_one_class_on_qnli), UNTESTABLE, "ch2_glue_reference_predictions_vary"),
    (dict(rate=0.0, predict=_one_class), UNTESTABLE, "ch2_glue_reference_predictions_vary"),
    (dict(rate=0.5), UNTESTABLE, "ch2_glue_reference_above_majority"),  # varies, but at chance
])
def test_a_constant_predicting_reference_makes_a_ch2_glue_part_untestable_never_contradicted(
        scratch_root, reference, expected, why):
    config = _config(scratch_root)
    tasks = config["finetune"]["glue"]["tasks"]
    _write_run(scratch_root, config, "ch2_hashformers-md5_pool", 0.5, tasks=tasks)
    _write_run(scratch_root, config, "ch2_hashformers-md5_emb_1k", 0.5, tasks=tasks)
    _write_run(scratch_root, config, "ch2_hashformers-bert_mlm", tasks=tasks, **reference)
    (result,) = _evaluate(scratch_root, _shipped(scratch_root, "ch2_emb_1k_far_below_compressed"))
    part = result.parts[0]
    assert part.verdict == expected and result.verdict == expected, part
    if why:
        assert f"Precondition {why}" in part.reason and part.interval is None
    if why == "ch2_glue_reference_predictions_vary":
        assert "ch2_hashformers-bert_mlm predicts one value for every example of" in part.reason
        assert "qnli (always" in part.reason
    if reference.get("predict") is _one_class_on_qnli:  # above Majority on average: only varying fails
        assert any(c.startswith("ch2_glue_reference_above_majority: supported") for c in part.checked)


def test_the_glue_majority_row_comes_from_the_dev_set_labels(scratch_root):
    """Always answering the dev set's most frequent label, scored by each task's own metric: accuracy is
    that label's share, F1 of the positive class 0 or its F1, correlations and Matthews 0."""
    from collections import Counter

    from leanlm.claims.results import Results
    from leanlm.data.tasks import get_task
    from leanlm.evaluation.metrics import compute

    config = _config(scratch_root)
    tasks = config["finetune"]["glue"]["tasks"]
    _write_run(scratch_root, config, "ch2_hashformers-bert_mlm", 0.8, tasks=tasks)
    reader = Results(config)
    for task in tasks:
        spec = get_task(task)
        ref = reader.task_results("ch2_hashformers-bert_mlm", "glue", task)[0]["per_example"]["data"]["reference"]
        value = reader.majority_value("ch2_hashformers-bert_mlm", "glue", task, spec.primary_metric)
        if spec.primary_metric == "accuracy":
            assert value == pytest.approx(Counter(ref).most_common(1)[0][1] / len(ref))
        elif spec.primary_metric in ("matthews", "spearman", "pearson"):
            assert value == 0.0
        else:
            major = Counter(ref).most_common(1)[0][0]
            assert value == pytest.approx(compute(spec.primary_metric, [major] * len(ref), ref))


def test_the_end_of_run_line_names_the_deciding_parts_effect_and_interval(scratch_root, capsys):
    from leanlm.claims.report import main, print_summary

    for run_id, rate in (("ch2_hashformers-lsh_add", 0.85), ("ch2_hashformers-md5_add", 0.55)):
        _write_run(scratch_root, _config(scratch_root), run_id, rate, tasks=["sst2"])
    path = _claims_file(scratch_root, [{**BASE, "id": "ch2_clear_win", "tasks": ["sst2"],
                                        "pairs": [["ch2_hashformers-lsh_add", "ch2_hashformers-md5_add"]]}])
    main(_config(scratch_root), draws=200, claims_file=path)
    row = pd.read_csv(scratch_root / "paper_tables" / "smoke" / "claims.csv").iloc[0]
    capsys.readouterr()
    print_summary("smoke")
    line = next(l for l in capsys.readouterr().out.splitlines() if "ch2_clear_win" in l)
    assert row["verdict"] == SUPPORTED and row["low"] > 0
    # the verdict with its pretraining runs (smoke pretrains once), then the part it rests on
    assert line.split() == ["ch2_clear_win", "supported,", "one", "pretraining", "run", "part", "1/1:", "effect", f"{row['estimate']:.3g}",
                            f"[{row['low']:.3g},", f"{row['high']:.3g}]", "(difference)"]


# --------------------------------------------------------------------------- `tasks: each` and its preconditions
CLEAR_WIN = [["ch2_hashformers-lsh_add", "ch2_hashformers-md5_add"]]
REFERENCE_VARIES = {"varies": "ch2_hashformers-bert_mlm", "reason": "The reference's predictions must vary."}
REFERENCE_ABOVE = {"a": "ch2_hashformers-bert_mlm", "b": {"baseline": "majority"}, "test": "better",
                   "reason": "The reference must beat the Majority row."}


def _learned_but(task):
    """Predictions right on nine examples in ten (wrong or off by one on the tenth: a perfect model's interval
    has no width), except on ``task``, where they are one class for every example."""
    return lambda spec, ref: _one_class(spec, ref) if spec.name == task else _learned(spec, ref)  # None: every task


def _learned(spec, ref):
    if spec.label_kind == "regression":
        return [r + 1.0 if i % 10 == 0 else r for i, r in enumerate(ref)]
    return [(r + 1) % spec.num_labels if i % 10 == 0 else r for i, r in enumerate(ref)]


def _each_task_runs(root, failing="qnli"):
    """A clear win on every GLUE task, and a reference that learned every task but ``failing``, where it
    answers one class for every example (at Majority, never above it)."""
    config = _config(root)
    tasks = config["finetune"]["glue"]["tasks"]
    _write_run(root, config, "ch2_hashformers-lsh_add", 0.85, tasks=tasks)
    _write_run(root, config, "ch2_hashformers-md5_add", 0.55, tasks=tasks)
    _write_run(root, config, "ch2_hashformers-bert_mlm", 0.9, tasks=tasks, predict=_learned_but(failing))
    return config, tasks


def test_a_part_per_task_is_guarded_on_its_own_task(scratch_root):
    """With ``tasks: each``, a precondition that takes the part's tasks is judged on the part's one task:
    the reference failing on QNLI makes the QNLI part untestable and no other (judged on every task, or
    remembered from another task's part, it would make all of them untestable, or none)."""
    config, tasks = _each_task_runs(scratch_root)
    assert tasks.index("qnli") > 0  # a part judged before QNLI's: a precondition remembered across tasks shows
    path = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_each_varies", "tasks": "each", "pairs": CLEAR_WIN, "requires": ["reference_varies"]},
        {**BASE, "id": "ch2_each_above", "tasks": "each", "pairs": CLEAR_WIN, "requires": ["reference_above"]},
    ], {"reference_varies": REFERENCE_VARIES, "reference_above": REFERENCE_ABOVE})
    results = _evaluate(scratch_root, path)
    for result in results:
        verdicts = {p.label.split("(")[-1].rstrip(")"): p.verdict for p in result.parts}
        assert verdicts == {t: UNTESTABLE if t == "qnli" else SUPPORTED for t in tasks}, (result.claim.id, verdicts)
        (qnli,) = [p for p in result.parts if p.label.endswith("(qnli)")]
        assert "(ch2_hashformers-bert_mlm" in qnli.reason and " on glue (qnli)) is " in qnli.reason, qnli.reason
    varies, above = (r.parts[tasks.index("qnli")].reason for r in results)
    assert "is contradicted: ch2_hashformers-bert_mlm predicts one value for every example of qnli (always" in varies
    assert "is inconclusive: effect 0 [" in above  # at the Majority row, not above it


def test_a_precondition_with_tasks_of_its_own_guards_every_part_per_task_on_those(scratch_root):
    """A precondition naming its tasks is judged on them whatever the guarded part's task: the reference
    learned SST-2, so every part is judged, that of the one task where it fails too (the first task: a
    precondition judged on the part's task would be remembered for the others)."""
    config, tasks = _each_task_runs(scratch_root, failing=_config(scratch_root)["finetune"]["glue"]["tasks"][0])
    assert tasks[0] != "sst2"
    path = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_each_on_sst2", "tasks": "each", "pairs": CLEAR_WIN,
         "requires": ["reference_varies_on_sst2", "reference_above_on_sst2"]},
    ], {"reference_varies_on_sst2": {**REFERENCE_VARIES, "tasks": ["sst2"]},
        "reference_above_on_sst2": {**REFERENCE_ABOVE, "tasks": ["sst2"]}})
    (result,) = _evaluate(scratch_root, path)
    assert [p.verdict for p in result.parts] == [SUPPORTED] * len(tasks), [(p.label, p.reason) for p in result.parts]
    for p in result.parts:
        varies, above = p.checked
        assert varies == "reference_varies_on_sst2: supported (ch2_hashformers-bert_mlm's predictions vary on every task)"
        assert above.startswith("reference_above_on_sst2: supported (effect ") and above.endswith("(examples), allowed (0.0, inf))")


def test_a_part_judged_alone_checks_its_preconditions_as_within_a_claim(scratch_root, monkeypatch):
    """``evaluate_part`` without a memo (a part judged on its own) gives the verdict ``evaluate_claim`` gives;
    within one evaluation, a precondition several claims share is judged once."""
    from leanlm.claims import verdicts
    from leanlm.claims.report import evaluate_all
    from leanlm.claims.results import Results
    from leanlm.runs import runs

    config, tasks = _each_task_runs(scratch_root)
    path = _claims_file(scratch_root, [
        {**BASE, "id": f"ch2_average_{i}", "pairs": CLEAR_WIN, "requires": ["reference_varies"]} for i in (1, 2)
    ], {"reference_varies": REFERENCE_VARIES})
    judged = []
    real = verdicts._predictions_vary
    monkeypatch.setattr(verdicts, "_predictions_vary", lambda *a: judged.append(a[0]) or real(*a))
    first, second = evaluate_all(config, draws=300, claims_file=path)
    assert len(judged) == 1  # the second claim's part reads the first one's precondition
    assert first.verdict == second.verdict == UNTESTABLE and "qnli (always" in first.parts[0].reason

    (part,) = load_claims(path)[0].parts
    profile_runs = {run.run_id: frozenset(run.finetune) for run in runs(config)}
    for reader in (Results(config), None):  # None: the part reads the profile's results itself
        alone = verdicts.evaluate_part(part, config, profile_runs, draws=300, results=reader)
        assert (alone.verdict, alone.reason) == (first.parts[0].verdict, first.parts[0].reason)
    assert len(judged) == 3

    # a claim judged on its own, without a reader or a memo: its two parts judge their shared precondition once
    two_parts = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_two_parts", "requires": ["reference_varies"],
         "pairs": CLEAR_WIN + [["ch2_hashformers-lsh_add", "ch2_hashformers-bert_mlm"]]}], {"reference_varies": REFERENCE_VARIES})
    claim = verdicts.evaluate_claim(load_claims(two_parts)[0], config, profile_runs, draws=300)
    assert claim.verdict == UNTESTABLE and [p.verdict for p in claim.parts] == [UNTESTABLE] * 2
    assert len(judged) == 4


def test_a_part_not_run_keeps_its_label_and_the_preconditions_it_passed(scratch_root):
    """A part whose own results are absent is not run, after its preconditions held: the label still says
    what it compares, and the preconditions checked are kept; a part the profile does not run at all says
    so before any precondition is judged."""
    import shutil

    config, _ = _each_task_runs(scratch_root, failing=None)
    shutil.rmtree(scratch_root / "results" / "smoke" / "runs" / "ch2_hashformers-md5_add")
    path = _claims_file(scratch_root, [
        {**BASE, "id": "ch2_absent", "pairs": CLEAR_WIN, "requires": ["reference_varies"]},
        {**BASE, "id": "ch2_unrun", "pairs": [["ch3_encoder-sha", "ch3_encoder-mha"]],
         "requires": ["reference_varies"]},
    ], {"reference_varies": REFERENCE_VARIES})
    config["experiments"] = [e for e in config["experiments"] if not e.startswith("ch3")]  # a profile without ch. 3
    config["_matrix"] = {k: v for k, v in config["_matrix"].items() if not k.startswith("ch3")}
    absent, unrun = (r.parts[0] for r in _evaluate_with(config, path))
    assert (absent.verdict, absent.label) == (NOT_RUN, "ch2_hashformers-lsh_add vs ch2_hashformers-md5_add on glue")
    assert absent.reason.startswith("no results of ch2_hashformers-md5_add on glue")
    assert absent.checked == ["reference_varies: supported (ch2_hashformers-bert_mlm's predictions vary on every task)"]
    assert unrun.verdict == NOT_RUN and unrun.label == "ch3_encoder-sha vs ch3_encoder-mha on glue"
    assert unrun.checked == [] and unrun.reason == "not run at this profile: ch3_encoder-mha, ch3_encoder-sha"


@pytest.mark.parametrize("tasks", ["each", "average"])
def test_a_family_the_profile_has_no_settings_for_is_not_run(scratch_root, tasks):
    """A profile without a finetune block for the claim's family (here SuperGLUE's removed) cannot list the
    tasks: the claim is not run, saying so, one part per pair, each labelled with what it compares and
    keeping the part it stands for (the report prints its effect and region)."""
    config = _config(scratch_root)
    del config["finetune"]["superglue"]
    pairs = [["ch3_encoder-mha", "ch3_encoder-sha"], ["ch3_encoder-mhe_mul", "ch3_encoder-sha"]]
    path = _claims_file(scratch_root, [{**BASE, "id": "ch3_no_block", "family": "superglue", "tasks": tasks,
                                        "pairs": pairs}])
    (result,) = _evaluate_with(config, path)
    assert result.verdict == NOT_RUN and len(result.parts) == 2
    for part, claim_part, (a, b) in zip(result.parts, result.claim.parts, pairs):
        assert part.part is claim_part and (part.part.a.label, part.part.b.label) == (a, b)
        assert (part.verdict, part.reason) == (NOT_RUN, "the profile has no finetune.superglue block")
        assert part.label == f"{a} vs {b}" + (" on superglue" if tasks == "average" else "")
