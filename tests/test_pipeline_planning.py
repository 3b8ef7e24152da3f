"""Planning alone, from Snakemake's dry run of the tiny project (tests/test_pipeline.py's, built by nothing
here): a broken profile fails before any job, naming the file and the key, and the paper profile plans one
pretraining per trained run and one fine-tuning per (run, family). The run of the DAG and its incremental
reruns are tests/test_pipeline.py's.
"""

from __future__ import annotations

import re

import pytest
import yaml

from test_pipeline import project, snakemake  # noqa: F401  (project is a fixture)

pytestmark = pytest.mark.slow


def test_bad_profile_fails_before_any_job(project, tmp_path):
    root, _ = project
    bad = root / "params" / "broken.yaml"
    doc = yaml.safe_load((root / "params" / "smoke.yaml").read_text())
    doc["models"]["bert"]["n_layer"] = 2
    bad.write_text(yaml.safe_dump(doc))
    try:
        out = snakemake(project, "-n", "--configfile", str(bad), check=False)
        assert "broken.yaml" in out and "n_layer" in out
    finally:
        bad.unlink()


def test_paper_dry_run_lists_every_job(project):
    """The paper profile plans one pretraining per trained run and one fine-tuning per (run, family)."""
    from leanlm.config import _load_matrix_cached, load_config
    from leanlm.runs import runs

    root, env = project
    jobs = planned_jobs_for(project, "params/paper.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEANLM_ROOT", str(root))
        _load_matrix_cached.cache_clear()
        paper = runs(load_config(root / "params" / "paper.yaml"))
        _load_matrix_cached.cache_clear()
    assert jobs["pretrain"] == sum(1 for r in paper if not r.evaluate_from) > 20
    assert jobs["finetune"] == sum(len(r.finetune) for r in paper)
    assert jobs["data"] == 1


def planned_jobs_for(project, params: str) -> dict[str, int]:
    out = snakemake(project, "-n", "--configfile", params)
    table = out.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


def test_pretraining_replicas_are_planned_as_runs_of_their_own(project):
    """pretrain_seeds: each listed experiment's trained runs plan one more pretraining per further seed and
    its fine-tuning jobs; the other jobs are those the profile planned without the key."""
    from leanlm.config import _load_matrix_cached, load_config
    from leanlm.runs import runs

    root, env = project
    paper = root / "params" / "paper.yaml"
    original = paper.read_text()
    try:
        doc = yaml.safe_load(original)
        doc["pretrain_seeds"] = {"seeds": [0, 1, 2], "experiments": ["ch3_encoder"]}
        paper.write_text(yaml.safe_dump(doc, sort_keys=False))
        jobs = planned_jobs_for(project, "params/paper.yaml")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LEANLM_ROOT", str(root))
            _load_matrix_cached.cache_clear()
            matrix = runs(load_config(paper))
            _load_matrix_cached.cache_clear()
        encoder = [r for r in matrix if r.experiment == "ch3_encoder"]
        assert jobs["pretrain"] == sum(1 for r in matrix if not r.evaluate_from) + 2 * len(encoder)
        assert jobs["finetune"] == sum(len(r.finetune) for r in matrix) + 2 * sum(len(r.finetune) for r in encoder)
        # (the target before --configfile, which takes every value after it)
        out = snakemake(project, "-n", "models/paper/ch3_encoder-mha@p2/model.safetensors", "--configfile", "params/paper.yaml")
        assert "ch3_encoder-mha@p2" in out and re.search(r"^pretrain\s+1$", out, re.M), out[-2000:]
    finally:
        paper.write_text(original)
