"""Input routes plug in: a stage finds its run's route by name (:data:`leanlm.plugins.INPUT_ROUTES`), so a
job's code fingerprint holds the route its run takes and no other.

A route is how a run's text becomes its model's inputs: the profile's subword ids (``subword``), ch. 4's
fixed text for FixedSeqQK beside them (``fixed_text``), ch. 2's hash codebook and features (``hashing``,
with the ch. 2 wing :mod:`leanlm.hashing` behind it). No stage imports a route module or the hashing wing,
whatever its objective or runners; a comment in a route file, or in a file of the hashing wing, changes
exactly the code fingerprints of the smoke profile's jobs whose run takes that route. Computed on a copy of
the package (provenance reads the copy), so the working tree is never edited.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from fingerprints import fingerprints
from leanlm import provenance
from leanlm.config import load_config
from leanlm.job_code import finetune_code, pretrain_code
from leanlm.plugins import INPUT_ROUTES, OBJECTIVES, TASK_RUNNERS, route_name
from leanlm.runs import finetune_settings, runs

ROOT = Path(__file__).resolve().parents[1]
ROUTE_FILES = sorted(f"routes/{path.name}" for path in (provenance.PACKAGE_DIR / "routes").glob("*.py")
                     if not path.name.startswith("_"))
# The ch. 2 wing: what a hash run's text goes through on its way in (its package docstring excepted).
HASHING_FILES = sorted(f"hashing/{path.name}" for path in (provenance.PACKAGE_DIR / "hashing").glob("*.py")
                       if path.name != "__init__.py")


def _files(*modules: str) -> set[str]:
    return {str(p.relative_to(provenance.PACKAGE_DIR)) for p in provenance.import_closure(*modules)}


def _users(route: str) -> set[str]:
    """The route files run by a run taking ``route``: its own and those its class derives from, found by
    importing it (independent of provenance's reading of the sources)."""
    return {f"routes/{cls.__module__.rpartition('.')[2]}.py" for cls in INPUT_ROUTES.get(route).__mro__
            if cls.__module__.startswith("leanlm.routes.")}


def test_the_routes_are_the_folders_files_and_every_run_takes_one():
    assert INPUT_ROUTES.names() == ["fixed_text", "hashing", "subword"]
    assert ROUTE_FILES == ["routes/fixed_text.py", "routes/hashing.py", "routes/subword.py"]
    config = load_config(ROOT / "params" / "smoke.yaml")
    taken = {route_name(run) for run in runs(config)}
    assert taken == set(INPUT_ROUTES.names()), taken


def test_choosing_a_route_imports_no_model_library():
    """route_name reads the run's settings alone (the Snakefile asks it for every job when it plans)."""
    config = load_config(ROOT / "params" / "smoke.yaml")
    settings = sorted({(run.tokenizer, run.backbone, run.objective) for run in runs(config)})
    code = f"""
import sys
from types import SimpleNamespace
from leanlm.plugins import route_name
settings = {settings!r}
print(sorted({{route_name(SimpleNamespace(tokenizer=t, backbone=b, objective=o)) for t, b, o in settings}}))
print(sorted(m for m in sys.modules if m == "torch" or m.startswith(("leanlm.modeling", "leanlm.routes.", "leanlm.hashing"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": "/usr/bin:/bin"}).stdout.splitlines()
    assert out == ["['fixed_text', 'hashing', 'subword']", "[]"]


@pytest.mark.parametrize("stage", ["pretrain", "finetune", "lm_finetune"])
def test_no_stage_imports_a_route_or_the_hashing_wing_whatever_its_plug_ins(stage):
    plug_ins = OBJECTIVES if stage == "pretrain" else TASK_RUNNERS
    reached = {}
    for name in plug_ins.names():
        for path in _files(f"leanlm.stages.{stage}", plug_ins.target(name)) & {*ROUTE_FILES, *HASHING_FILES}:
            reached.setdefault(path, []).append(name)
    assert not reached, f"the {stage} stage imports route files (file: with the {plug_ins.kind} named): {reached}"


@pytest.fixture(scope="module")
def smoke_jobs():
    """Each pretraining job and one fine-tuning job a run of the smoke profile, with the route its run takes."""
    config = load_config(ROOT / "params" / "smoke.yaml")
    jobs = {}
    for run in runs(config):
        if not run.evaluate_from:
            jobs[f"pretrain {run.run_id}"] = (lambda run=run: pretrain_code(run), route_name(run))
        for family in run.finetune[:1]:
            tasks = finetune_settings(config, run, family)["tasks"]
            jobs[f"finetune {run.run_id} {family}"] = (
                lambda run=run, family=family, tasks=tasks: finetune_code(family, tasks, run), route_name(run))
    return jobs


def test_a_comment_in_a_route_file_reruns_exactly_the_runs_taking_it(smoke_jobs, package_copy):
    users = {name: _users(name) for name in INPUT_ROUTES.names()}
    assert users["fixed_text"] == {"routes/fixed_text.py", "routes/subword.py"}  # ch. 4 adds its text to subword ids
    edited = {path: {job for job, (_, route) in smoke_jobs.items() if path in users[route]} for path in ROUTE_FILES}
    edited.update({path: {job for job, (_, route) in smoke_jobs.items() if route == "hashing"} for path in HASHING_FILES})
    before = fingerprints(smoke_jobs)
    for path, expected in edited.items():
        target = package_copy / path
        original = target.read_bytes()
        target.write_bytes(original + b"\n# a comment\n")
        try:
            after = fingerprints(smoke_jobs)
        finally:
            target.write_bytes(original)
        changed = {job for job in before if before[job] != after[job]}
        assert changed == expected, (path, sorted(changed ^ expected)[:6])
        assert 0 < len(changed) < len(before), (path, len(changed))


def test_a_route_is_found_by_name_and_a_missing_one_fails_loudly():
    from leanlm.errors import ConfigError
    from leanlm.stages.input_route import InputRoute

    for name in INPUT_ROUTES.names():
        assert issubclass(INPUT_ROUTES.get(name), InputRoute), name
        assert importlib.import_module(INPUT_ROUTES.target(name).partition(":")[0]).Route.name == name
    with pytest.raises(ConfigError, match="unknown input route 'hashed'; known: fixed_text, hashing, subword"):
        INPUT_ROUTES.get("hashed")
