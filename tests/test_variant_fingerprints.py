"""Registries are folders loaded lazily, and a job's code fingerprint holds only the variants its run builds.

For every variant file (each ch. 3 attention, ch. 4 mixer and word-embedding module), a comment appended to
it changes exactly the code fingerprints of the smoke profile's jobs that use it: the pretraining jobs and the
fine-tuning jobs of the runs whose model builds a variant defined there (or one that refers to it: MHE derives
from SHA, MLP sizes itself by Standard). No stage imports a variant file whatever its run (its objective or
runners): a job reaches a variant only through its model. Computed in-process on a copy of the package
(provenance reads the copy), so the working tree is never edited.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from fingerprints import fingerprints
from leanlm import provenance
from leanlm.config import load_config
from leanlm.job_code import finetune_code, pretrain_code
from leanlm.modeling.variants import ATTENTION, EMBEDDINGS, MIXERS, model_variants
from leanlm.plugins import OBJECTIVES, TASK_RUNNERS
from leanlm.runs import finetune_settings, runs

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = (ATTENTION, MIXERS, EMBEDDINGS)
VARIANT_MODULES = sorted({registry.module_of(name) for registry in REGISTRIES for name in registry.names()})


def _file(module: str) -> str:
    return module.removeprefix("leanlm.").replace(".", "/") + ".py"


def _refers_to(module: str) -> set[str]:
    """The variant modules ``module`` refers to at run time (itself, the classes and functions in its namespace,
    whose bases are in theirs), found by importing it: independent of provenance's reading of the sources."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or not name.startswith("leanlm.modeling"):
            continue
        seen.add(name)
        for obj in vars(importlib.import_module(name)).values():
            if inspect.isclass(obj) or inspect.isfunction(obj):
                todo.append(obj.__module__)
    return seen & set(VARIANT_MODULES)


def _files(*modules: str) -> set[str]:
    """The files a job's stage imports whatever its model (relative to the package)."""
    return {str(p.relative_to(provenance.PACKAGE_DIR)) for p in provenance.import_closure(*modules)}


@pytest.fixture(scope="module")
def smoke_jobs():
    config = load_config(ROOT / "params" / "smoke.yaml")
    jobs = {}
    for run in runs(config):
        users = set().union(*(_refers_to(registry.module_of(name)) for registry, name in model_variants(run.model)))
        if not run.evaluate_from:
            jobs[f"pretrain {run.run_id}"] = (lambda run=run: pretrain_code(run), users)
        for family in run.finetune[:1]:  # one family a run: the model's part is the same in each
            tasks = finetune_settings(config, run, family)["tasks"]
            jobs[f"finetune {run.run_id} {family}"] = (
                lambda run=run, family=family, tasks=tasks: finetune_code(family, tasks, run), users)
    return jobs


@pytest.mark.parametrize("stage", ["pretrain", "finetune"])
def test_no_stage_imports_a_variant_whatever_its_plug_ins(stage):
    plug_ins = OBJECTIVES if stage == "pretrain" else TASK_RUNNERS
    variant_files = {_file(module) for module in VARIANT_MODULES}
    reached = {}
    for name in plug_ins.names():
        for path in _files(f"leanlm.stages.{stage}", plug_ins.target(name)) & variant_files:
            reached.setdefault(path, []).append(name)
    assert not reached, f"the {stage} stage imports variant files (file: with the {plug_ins.kind} named): {reached}"


def test_a_comment_in_a_variant_file_reruns_exactly_its_users(smoke_jobs, package_copy):
    assert len(VARIANT_MODULES) >= 15, VARIANT_MODULES  # 9 attention, 5 mixer and 2 embedding files at least
    before = fingerprints(smoke_jobs)
    for module in VARIANT_MODULES:
        path = package_copy / _file(module)
        original = path.read_bytes()
        path.write_bytes(original + b"\n# a comment\n")
        try:
            after = fingerprints(smoke_jobs)
        finally:
            path.write_bytes(original)
        changed = {job for job in before if before[job] != after[job]}
        expected = {job for job, (_, users) in smoke_jobs.items() if module in users}
        assert changed == expected, (module, sorted(changed ^ expected)[:6])
        if module.endswith(("attention.el_att", "mixers.mlp", "hash_embeddings", "projection_embeddings")):
            assert 0 < len(changed) < len(before) / 4, (module, len(changed))  # a few runs, not all of them


def test_listing_the_variants_imports_none_and_a_config_imports_its_own():
    code = """
import sys
from leanlm.modeling import ModelConfig
from leanlm.modeling.variants import ATTENTION, EMBEDDINGS, MIXERS
names = ATTENTION.names() + MIXERS.names() + EMBEDDINGS.names()
assert {"mha", "el_att", "gqa", "standard", "mlp", "hash_pool", "eelbert"} <= set(names), names
variants = {registry.module_of(name) for registry in (ATTENTION, MIXERS, EMBEDDINGS) for name in registry.names()}
loaded = lambda: sorted(m for m in variants if m in sys.modules)
print(loaded())
ModelConfig.preset("tiny", attention="el_att")
print(loaded())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": "/usr/bin:/bin"}).stdout.splitlines()
    # Listing imports no variant; validating the config loads at most the two it builds (BERT's word embedding
    # too), and none once that config has passed against these sources before (leanlm.memo).
    assert out[0] == "[]"
    assert out[1] in ("[]", "['leanlm.modeling.attention.el_att', 'leanlm.modeling.standard_embeddings']"), out
