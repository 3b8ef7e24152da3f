"""Hostile or stale results end in a clear refusal naming the file, what is wrong and what to do (issue 24,
cases 5, 6, 10 and part of 14), not in a silently different table or verdict.

- Case 5: per-example data edited to disagree with the stored metric (predictions made perfect) drove a
  claim's interval while A - B still came from the stored metrics; the claims stage now recomputes each
  metric from the per-example data with the evaluation's own metric functions and refuses a record where
  the two disagree, naming the file, the task, the seed and both values.
- Case 6: a NaN (or infinite) metric was averaged away (GLUE's mean became the mean of the other tasks);
  aggregation refuses non-finite metrics, naming the file, the task, the seed and the metric.
- Case 10: ``leanlm claims`` run by hand read a results file of another profile, and ``leanlm aggregate`` /
  ``leanlm render`` run by hand after a profile edit used results made under the old settings with the
  new ones; each record's profile and result-changing settings (leanlm.record_settings) are compared
  with the current profile and a mismatch is refused, while a cosmetic edit (resources) still passes.
- Case 14 (part): a non-numeric metric made aggregation raise a raw ValueError, and per-example arrays of
  unequal length a raw ValueError in the claims stage; both are now DataErrors naming the file.

The records are real: a tiny ch. 2 profile pretrains and fine-tunes two runs (BERT-MLM and BERT-S+R on
MRPC and STS-B) with the project's own jobs, once per module; each test copies them into its scratch
project and tampers with them as an adversary (or a careless hand) would.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)
from test_ch4_pipeline import tiny_pipeline  # noqa: F401  (ch. 4's real records, for the last test)

REPO = Path(__file__).resolve().parents[1]
MLM, SR = "ch2_hashformers-bert_mlm", "ch2_hashformers-bert_sr"
SEED = 3  # the fine-tuning seed of the tiny profile (finetune_variants.glue_ch2.seeds)
CLAIM = {"id": "ch2_mlm_beats_sr", "chapter": 2, "where": "Table 2.1", "quote": "A sentence the thesis prints, long enough.",
         "family": "glue", "tasks": "average", "test": "better", "pairs": [[MLM, SR]]}


# ------------------------------------------------------------------------------- real records, once
def _copy_project(root: Path) -> None:
    """What the scratch_root fixture copies: params, DVC's stage files, schemas and templates."""
    shutil.copytree(REPO / "params", root / "params")
    for name in ("dvc.yaml", "dvc_stages.yaml"):
        shutil.copy(REPO / name, root / name)
    for sub in ("schemas", "templates"):
        shutil.copytree(REPO / "workflow" / sub, root / "workflow" / sub)


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """A tiny smoke profile (test_faults_runtime._tiny: ch. 2 only, MRPC and STS-B, one seed) whose BERT-MLM
    and BERT-S+R runs were pretrained and fine-tuned by the project's jobs: the root holding their records."""
    import torch

    from leanlm.config import _load_matrix_cached, load_config
    from leanlm.stages.finetune import finetune
    from leanlm.stages.pretrain import pretrain
    from test_faults_runtime import _tiny

    root = tmp_path_factory.mktemp("results_root")
    _copy_project(root)
    saved = os.environ.get("LEANLM_ROOT")
    os.environ["LEANLM_ROOT"] = str(root)
    _load_matrix_cached.cache_clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the pipeline's jobs run; tiny tensors gain nothing from more
    try:
        _tiny(root, seeds=(SEED,))
        edit_yaml(root / "params" / "smoke.yaml", lambda d: d["pretrain"]["shuffle_random"].update(
            steps=4, batch_size=4, warmup_steps=1, checkpoint_every=None))
        config = load_config(root / "params" / "smoke.yaml")
        for run in (MLM, SR):
            pretrain(config, run)
            finetune(config, run, "glue")
        yield root
    finally:
        torch.set_num_threads(threads)
        os.environ.pop("LEANLM_ROOT") if saved is None else os.environ.__setitem__("LEANLM_ROOT", saved)
        _load_matrix_cached.cache_clear()


@pytest.fixture
def project(scratch_root, real_runs):
    """The scratch project with the tiny profile and a copy of the real runs' records."""
    from leanlm.config import _load_matrix_cached

    shutil.copy(real_runs / "params" / "smoke.yaml", scratch_root / "params" / "smoke.yaml")
    shutil.copytree(real_runs / "results", scratch_root / "results")
    _load_matrix_cached.cache_clear()
    return scratch_root


def record_path(root: Path, run_id: str, name: str = "glue", profile: str = "smoke") -> Path:
    return root / "results" / profile / "runs" / run_id / f"{name}.json"


def tamper(path: Path, change) -> dict:
    """Let ``change`` edit the JSON document at ``path`` in place and write it back (NaN and infinities as
    Python's json writes them, as a runner that stored one would have)."""
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))
    return doc


def result_of(doc: dict, task: str, seed: int = SEED) -> dict:
    return next(r for r in doc["results"] if r["task"] == task and r["seed"] == seed)


def leanlm(capsys, *args: str) -> tuple[int, str]:
    """``leanlm ARGS`` in process: its exit status and everything it printed."""
    from leanlm.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def claims_file(root: Path, claims=(CLAIM,)) -> Path:
    path = root / "params" / "test_claims.yaml"
    path.write_text(yaml.safe_dump({"claims": list(claims)}, sort_keys=False))
    return path


def run_claims(capsys, root: Path, params: Path | None = None) -> tuple[int, str]:
    params = params or root / "params" / "smoke.yaml"
    return leanlm(capsys, "claims", "--params", str(params), "--claims", str(claims_file(root)), "--draws", "200")


def assert_refused(code: int, printed: str, *needles: str) -> None:
    """A refusal: exit status 2, one message (no traceback) holding every needle."""
    assert code == 2, printed
    assert "Traceback" not in printed
    for needle in needles:
        assert needle in printed, f"{needle!r} not in: {printed}"


# --------------------------------------------------------------------------- untampered records pass
def test_the_real_records_pass_every_check(project, capsys):
    """The checks refuse nothing the jobs themselves wrote: aggregation, its table and the claims stage."""
    code, printed = leanlm(capsys, "aggregate", "--params", str(project / "params" / "smoke.yaml"))
    assert code == 0, printed
    tidy = pd.read_csv(project / "results" / "smoke" / "all_runs.csv")
    assert set(tidy["task"]) == {"mrpc", "stsb"} and np.isfinite(tidy["value"]).all()
    code, printed = run_claims(capsys, project)
    assert code == 0, printed
    verdicts = pd.read_csv(project / "paper_tables" / "smoke" / "claims.csv")
    assert verdicts["basis"].tolist() == ["examples"]  # the interval resampled the real per-example data


# ---------------------------------------------------------------------------------------- case 5
def test_predictions_edited_to_disagree_with_the_metric_are_refused(project, capsys):
    """Issue 24, case 5: predictions made perfect while the stored accuracy stays: the bootstrap would resample
    the edited predictions (a huge effect) while A - B came from the stored metrics."""
    from leanlm.evaluation.metrics import compute

    path = record_path(project, MLM)

    def perfect(doc):
        data = result_of(doc, "mrpc")["per_example"]["data"]
        data["prediction"] = list(data["reference"])

    doc = tamper(path, perfect)
    result = result_of(doc, "mrpc")
    stored = result["metrics"]["accuracy"]
    recomputed = compute("accuracy", result["per_example"]["data"]["prediction"], result["per_example"]["data"]["reference"])
    assert not math.isclose(stored, recomputed)  # the edit changed what the data says
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(path), "mrpc", f"seed {SEED}", "accuracy", repr(stored), repr(recomputed),
                   "leanlm finetune")


def test_a_stored_metric_edited_away_from_its_per_example_data_is_refused(project, capsys):
    """The other direction: the stored Spearman of STS-B raised, its predictions left as they were."""
    path = record_path(project, SR)
    doc = tamper(path, lambda d: result_of(d, "stsb")["metrics"].update(spearman=0.99))
    assert result_of(doc, "stsb")["primary_metric"] == "spearman"
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(path), "stsb", "spearman", "0.99")


# ---------------------------------------------------------------------------------------- case 6
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_metric_is_refused_by_aggregation(project, capsys, value):
    """Issue 24, case 6: a NaN metric left GLUE's mean to the other tasks (45.85 -> 41.69)."""
    path = record_path(project, MLM)
    tamper(path, lambda d: result_of(d, "stsb")["metrics"].update(spearman=value))
    code, printed = leanlm(capsys, "aggregate", "--params", str(project / "params" / "smoke.yaml"))
    assert_refused(code, printed, str(path), "stsb", f"seed {SEED}", "spearman", str(value))
    assert not (project / "results" / "smoke" / "all_runs.csv").exists()
    # the claims stage reads the same record: it refuses it too
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(path), "stsb", "spearman")


# ---------------------------------------------------------------------------------- case 14 (part)
@pytest.mark.parametrize("value", ["0.41x", None, [0.41], True])
def test_a_non_numeric_metric_is_refused_by_aggregation(project, capsys, value):
    """Issue 24, case 14: a metric that is not a number raised a raw ValueError/TypeError in aggregate.py."""
    path = record_path(project, SR)
    tamper(path, lambda d: result_of(d, "mrpc")["metrics"].update(accuracy=value))
    code, printed = leanlm(capsys, "aggregate", "--params", str(project / "params" / "smoke.yaml"))
    assert_refused(code, printed, str(path), "mrpc", f"seed {SEED}", "accuracy", repr(value))


def test_per_example_arrays_of_unequal_length_are_refused(project, capsys):
    """Issue 24, case 14: a per-example field cut short raised a raw ValueError from the claims' statistics."""
    path = record_path(project, MLM)
    doc = tamper(path, lambda d: result_of(d, "stsb")["per_example"]["data"]["reference"].pop())
    n = len(result_of(doc, "stsb")["per_example"]["data"]["prediction"])
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(path), "stsb", f"seed {SEED}", f"prediction {n}", f"reference {n - 1}")


@pytest.mark.parametrize("value", ["yes", [1, 0]])  # a list in place of a number: numpy refused it, uncaught
def test_non_numeric_per_example_values_are_refused(project, capsys, value):
    path = record_path(project, SR)
    tamper(path, lambda d: result_of(d, "mrpc")["per_example"]["data"]["prediction"].__setitem__(0, value))
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(path), "mrpc", "prediction", "not a list of numbers")


# --------------------------------------------------------------------------------------- case 10
def test_claims_by_hand_refuse_results_of_another_profile(project, capsys):
    """Issue 24, case 10: the smoke runs' results copied into another profile's folder; `leanlm claims` of
    that profile read them as its own."""
    other = project / "params" / "other.yaml"
    doc = yaml.safe_load((project / "params" / "smoke.yaml").read_text())
    doc["profile"] = "other"
    other.write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copytree(project / "results" / "smoke", project / "results" / "other")
    code, printed = run_claims(capsys, project, params=other)
    assert_refused(code, printed, str(record_path(project, MLM, profile="other")), "'smoke'", "'other'")


@pytest.mark.parametrize("edit, where, needles", [
    (lambda d: d["finetune_variants"]["glue_ch2"].update(epochs=2), (MLM, "glue"), ["finetune.epochs", "1", "2"]),
    (lambda d: d["pretrain_variants"]["mlm_ch2"].update(steps=8), (MLM, "pretrain"), ["pretrain.steps", "4", "8"]),
    (lambda d: d["models"]["bert"].update(d_ff=48), (MLM, "glue"), ["model.d_ff", "32", "48"]),
    (lambda d: d["data"]["tasks"].update(max_eval_examples=5), (MLM, "pretrain"),
     ["config.data.tasks.max_eval_examples", "5"]),
])
def test_aggregate_and_claims_by_hand_after_a_profile_edit_are_refused(project, capsys, edit, where, needles):
    """Issue 24, case 10: the profile edited after the runs (nothing rerun), then the stages by hand."""
    edit_yaml(project / "params" / "smoke.yaml", edit)
    path = record_path(project, *where)
    code, printed = leanlm(capsys, "aggregate", "--params", str(project / "params" / "smoke.yaml"))
    assert_refused(code, printed, str(path), *needles, "snakemake")
    assert not (project / "results" / "smoke" / "all_runs.csv").exists()
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(path), *needles)


def test_a_cosmetic_profile_edit_is_not_refused(project, capsys):
    """What changes no result: resources, and the settings of a block no record here was made with."""
    def cosmetic(doc):
        doc["resources"]["finetune"]["mem_mb"] = 4000
        doc["pretrain"]["causal_lm"]["lr"] = 5.0e-4  # no ch. 2 run pretrains with causal LM

    edit_yaml(project / "params" / "smoke.yaml", cosmetic)
    code, printed = leanlm(capsys, "aggregate", "--params", str(project / "params" / "smoke.yaml"))
    assert code == 0, printed
    code, printed = run_claims(capsys, project)
    assert code == 0, printed


def test_results_moved_to_another_run_are_refused(project, capsys):
    """A record copied over another run's (same profile): the claims would read BERT-S+R's numbers as MLM's."""
    shutil.copy(record_path(project, SR), record_path(project, MLM))
    code, printed = run_claims(capsys, project)
    assert_refused(code, printed, str(record_path(project, MLM)), SR, MLM)


def test_render_by_hand_after_a_profile_edit_is_refused(scratch_root, capsys):
    """Issue 24, case 10: Table 3.1 rendered by hand after finetune.glue.lr was edited would caption
    results fine-tuned at the old rate with the new one. The tidy table is ch3_synthetic's for every ch. 3
    run, fingerprinted as `leanlm aggregate` fingerprints what it checked, under the profile before the edit."""
    from ch3_synthetic import tidy_frame
    from leanlm.config import load_config
    from leanlm.record_settings import settings_hash
    from leanlm.runs import runs

    params = scratch_root / "params" / "smoke.yaml"
    config = load_config(params)
    frame = tidy_frame(config)
    by_id = {run.run_id: run for run in runs(config)}
    frame["settings_hash"] = [settings_hash(config, by_id[r], f) for r, f in zip(frame["run_id"], frame["family"])]
    frame = frame[frame["experiment"] == "ch3_encoder"]  # what Table 3.1 reads: its experiment's piece
    out = scratch_root / "results" / "smoke" / "experiments" / "ch3_encoder.csv"
    out.parent.mkdir(parents=True)
    frame.to_csv(out, index=False)
    code, printed = leanlm(capsys, "render", "--params", str(params), "--table", "table_3_1")
    assert code == 0, printed  # the profile the results were aggregated under renders
    edit_yaml(params, lambda d: d["resources"]["finetune"].update(mem_mb=4000))
    assert leanlm(capsys, "render", "--params", str(params), "--table", "table_3_1")[0] == 0  # cosmetic
    edit_yaml(params, lambda d: d["finetune"]["glue"].update(lr=1.0e-3))
    code, printed = leanlm(capsys, "render", "--params", str(params), "--table", "table_3_1")
    assert_refused(code, printed, str(out), "ch3_encoder-", "glue", "leanlm aggregate")
    # a piece from before the fingerprints (or made without a profile) is refused alike
    frame.drop(columns="settings_hash").to_csv(out, index=False)
    code, printed = leanlm(capsys, "render", "--params", str(params), "--table", "table_3_1")
    assert_refused(code, printed, str(out), "leanlm aggregate")


@pytest.mark.slow
def test_real_ch4_records_pass_aggregation_and_claims_against_their_profile(tiny_pipeline, capsys):  # noqa: F811
    """No false refusal on the records of other runners: ch. 4's tiny pipeline (lm-eval's per-document
    scores and perplexities, the analysis family's context-length perplexities, a skip run evaluating another
    run's model) aggregates with its profile's check, every row fingerprinted, and its claims recompute."""
    from leanlm.claims.report import evaluate_all

    root, config, _ = tiny_pipeline
    code, printed = leanlm(capsys, "aggregate", "--params", str(root / "params" / "tiny.yaml"))
    assert code == 0, printed
    tidy = pd.read_csv(root / "results" / "tiny" / "all_runs.csv", dtype={"settings_hash": str})
    assert set(tidy["family"]) == {"lm_eval", "analysis"} and tidy["settings_hash"].str.fullmatch("[0-9a-f]{16}").all()
    part = {"chapter": 4, "where": "Table 4.1", "quote": "A sentence the thesis prints, long enough.", "test": "better"}
    path = claims_file(root, [
        {**part, "id": "ch4_ppl", "family": "lm_eval", "tasks": ["lm_eval_wikitext", "lm_eval_lambada_openai"],
         "metric": "primary", "effect": "ratio", "margin": 1.0,
         "pairs": [["ch4_hybrid-fixed_seq_qk", "ch4_skip-fixed_seq_qk"]]},
        {**part, "id": "ch4_acc", "family": "lm_eval", "tasks": ["lm_eval_arc_easy"], "metric": "acc_norm",
         "pairs": [["ch4_hybrid-fixed_seq_qk", "ch4_skip-fixed_seq_qk"]]},
    ])
    results = evaluate_all(config, draws=100, claims_file=path)
    assert [p.interval.basis for r in results for p in r.parts] == ["examples", "examples"]
