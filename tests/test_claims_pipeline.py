"""The claims stage on the records of real runs: ch. 4's tiny pipeline (test_ch4_pipeline's fixture:
tasks stage, pretraining, lm-eval through our adapter, analysis, skip, aggregation)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_ch4_pipeline import tiny_pipeline  # noqa: F401
from test_per_example import observed

pytestmark = pytest.mark.slow


def test_lm_eval_results_keep_per_document_scores(tiny_pipeline):  # noqa: F811
    root, _, _ = tiny_pipeline
    record = json.loads((root / "results" / "tiny" / "runs" / "ch4_hybrid-fixed_seq_qk" / "lm_eval.json").read_text())
    by_task = {r["task"]: r for r in record["results"]}
    for task, metrics in (("lm_eval_arc_easy", ["acc", "acc_norm"]), ("lm_eval_wikitext", ["word_perplexity"]),
                          ("lm_eval_lambada_openai", ["perplexity", "acc"])):
        result = by_task[task]
        assert len(next(iter(result["per_example"]["data"].values()))) == 6  # limit: 6 documents
        for metric in metrics:
            assert observed(result["per_example"], metric) == pytest.approx(result["metrics"][metric], rel=1e-5)
    analysis = json.loads((root / "results" / "tiny" / "runs" / "ch4_hybrid-fixed_seq_qk" / "analysis.json").read_text())
    (result,) = analysis["results"]
    for metric in [m for m in result["metrics"] if m.startswith("perplexity")]:
        assert observed(result["per_example"], metric) == pytest.approx(result["metrics"][metric], rel=1e-5)
    pretrain = json.loads((root / "results" / "tiny" / "runs" / "ch4_hybrid-fixed_seq_qk" / "pretrain.json").read_text())
    timing = pretrain["timing"]
    assert len(timing["step_seconds"]) == timing["timed_steps"]
    assert sum(timing["step_seconds"]) == pytest.approx(timing["timed_seconds"], abs=1e-4)


def test_claims_stage_on_real_records(tiny_pipeline):  # noqa: F811
    from leanlm.claims.report import main

    root, config, _ = tiny_pipeline
    quote = "A sentence of the thesis, quoted for the test."
    claims = {"claims": [
        {"id": "ch4_skip_worse", "chapter": 4, "where": "Table 4.1", "quote": quote, "family": "lm_eval",
         "tasks": ["lm_eval_wikitext"], "metric": "word_perplexity", "effect": "ratio", "test": "better",
         "margin": 1.0, "pairs": [["ch4_hybrid-fixed_seq_qk", "ch4_skip-fixed_seq_qk"]]},
        {"id": "ch4_hybrid_near_random", "chapter": 4, "where": "Table 4.1", "quote": quote, "family": "lm_eval",
         "tasks": ["lm_eval_arc_easy"], "metric": "acc", "test": "equivalent", "margin": 50.0,
         "pairs": [["ch4_hybrid-fixed_seq_qk", {"baseline": "random_guess"}]]},
        {"id": "ch4_context", "chapter": 4, "where": "Table 4.4", "quote": quote, "family": "analysis",
         "tasks": ["attention_analysis"], "effect": "ratio", "test": "better", "margin": 1.0,
         "parts": [{"a": {"run": "ch4_hybrid-fixed_seq_qk", "metric": "perplexity_ctx@max"},
                    "b": {"run": "ch4_hybrid-fixed_seq_qk", "metric": "perplexity_ctx@min"}}]},
        {"id": "ch4_uniform_absent", "chapter": 4, "where": "Table 4.1", "quote": quote, "family": "lm_eval",
         "tasks": ["lm_eval_arc_easy"], "metric": "acc", "pairs": [["ch4_uniform-standard", "ch4_uniform-mlp"]]},
    ]}
    path = root / "params" / "claims_test.yaml"
    path.write_text(yaml.safe_dump(claims, sort_keys=False))
    templates = root / "workflow" / "templates"
    if not templates.exists():  # the fixture's root has no templates (its tests render nothing)
        shutil.copytree(Path(__file__).resolve().parents[1] / "workflow" / "templates", templates)
    main(config, draws=300, claims_file=path)
    df = pd.read_csv(root / "paper_tables" / "tiny" / "claims.csv").set_index("claim")
    skip = df.loc["ch4_skip_worse"]
    assert skip["basis"] == "examples" and np.isfinite(skip["low"]) and skip["low"] <= skip["estimate"] <= skip["high"]
    assert skip["verdict"] in ("supported", "contradicted", "inconclusive")
    near = df.loc["ch4_hybrid_near_random"]
    assert near["b"] == pytest.approx(25.0)  # the random-guess row of a 4-way choice, in points
    assert near["verdict"] == "supported"  # +-50 points of 25 holds for any accuracy: a wide interval still fits
    # the analysis family runs once, but keeps per-document NLL at each context length: documents resample
    context = df.loc["ch4_context"]
    assert context["basis"] == "examples" and context["low"] <= context["estimate"] <= context["high"]
    assert df.loc["ch4_uniform_absent", "verdict"] == "not run"
