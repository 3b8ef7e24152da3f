"""Section 5: the pipeline's own commands on the device, one run per chapter, on the bundle's data.

The rules run ``leanlm pretrain --params params/<profile>.yaml --run RUN`` and ``leanlm finetune ...
--family FAMILY`` in the project root. Here the same commands run as subprocesses in a scratch project
(a temporary folder holding a copy of params/, dvc.yaml, the schemas and templates, the bundle's profile
as params/<profile>.yaml and the bundle's prepared data/<profile>/), with ``LEANLM_ROOT`` pointing at it
and leanlm's cache inside it: nothing of the checkout is touched. Each command gets the section's time
left as its timeout; its output goes to ``<out>/pipeline.log``; the record keeps its exit status, wall
time, the tail of its output when it failed, and the numbers it wrote (pretrain.json's summary and
validation, each fine-tuned task's primary metric).

:data:`PIPELINE_RUNS`: ch. 4's hybrid Approximate decoder (causal LM with the Taylor kernel and SDPA
layers, then lm-eval), ch. 2's HashFormer MD5-Proj (Shuffle+Random, then GLUE), ch. 3's BERT with MHE-MUL
(MLM, then GLUE).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from leanlm.benchmarks.gpucheck.record import OutOfBudget

# Ch. 4 first: the first GPU check ran ch. 2's and ch. 3's runs to the end (28 + 74 s and 57 + 98 s of wall time on
# the H200, call-2) and killed ch. 4's pretraining after 33 s; a section of 300 s holds one chapter's
# commands and most of a second's, so the run no GPU has finished goes first.
PIPELINE_RUNS = (("ch4_hybrid-approximate", "lm_eval"), ("ch2_hashformers-md5_proj", "glue"),
                 ("ch3_encoder-mhe_mul", "glue"))
PROFILE = "smoke"
LOG_NAME = "pipeline.log"
TAIL_LINES = 30
# The shortest measured on the H200 (ch. 2's, warm machine: call-2), rounded up.
NEED_S = {"pretrain": 30.0, "finetune": 66.0}
TINY_NEED_S = 5.0


def package_root() -> Path:
    """The folder holding the leanlm package (workflow/), for the subprocesses' PYTHONPATH."""
    import leanlm

    return Path(leanlm.__file__).resolve().parents[1]


def scratch_project(root: Path, profile_text: str) -> Path:
    """A project root at ``root`` with the checkout's params/, dvc.yaml, dvc_stages.yaml, schemas and
    templates, and ``profile_text`` as params/<PROFILE>.yaml."""
    from leanlm import paths

    source = paths.project_root()
    shutil.copytree(source / "params", root / "params", dirs_exist_ok=True)
    for name in ("dvc.yaml", "dvc_stages.yaml", "Snakefile"):
        if (source / name).is_file():
            shutil.copy(source / name, root / name)
    for sub in ("schemas", "templates"):
        shutil.copytree(source / "workflow" / sub, root / "workflow" / sub, dirs_exist_ok=True)
    (root / "params" / f"{PROFILE}.yaml").write_text(profile_text, encoding="utf-8")
    return root


def leanlm_env(root: Path) -> dict[str, str]:
    """The environment of a leanlm command in the scratch project: its root and cache, this package first
    on the path (absolute: the command runs elsewhere), offline hub."""
    env = dict(os.environ)
    entries = [str(package_root())] + [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(LEANLM_ROOT=str(root), LEANLM_CACHE=env.get("LEANLM_CACHE") or str(root / "cache"),
               PYTHONPATH=os.pathsep.join(dict.fromkeys(entries)), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def run_leanlm(args: list[str], root: Path, log: Path, timeout: float, env: dict[str, str] | None = None
               ) -> dict[str, Any]:
    """Run ``python -m leanlm.cli ARGS`` in ``root``; append its output to ``log``; raise RuntimeError with
    the output's tail when it fails, OutOfBudget when it outlasts ``timeout`` (its process group killed)."""
    command = [sys.executable, "-m", "leanlm.cli", *args]
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"\n$ leanlm {' '.join(args)}\n")
        handle.flush()
        process = subprocess.Popen(command, cwd=root, env=env or leanlm_env(root), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=max(timeout, 0.1))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            timed_out = True
        handle.write(output or "")
    seconds = time.perf_counter() - started
    tail = (output or "").rstrip().splitlines()[-TAIL_LINES:]
    if timed_out:
        raise OutOfBudget(f"`leanlm {' '.join(args)}` outlasted the {timeout:.0f} s left of the section and was "
                           f"killed; its last lines:\n" + "\n".join(tail))
    if process.returncode != 0:
        raise RuntimeError(f"`leanlm {' '.join(args)}` exited with status {process.returncode} after "
                           f"{seconds:.1f} s; its last lines:\n" + "\n".join(tail))
    return {"command": f"leanlm {' '.join(args)}", "exit_status": 0, "wall_s": seconds}


def _pretrain_numbers(root: Path, run_id: str) -> dict[str, Any]:
    record = json.loads((root / "results" / PROFILE / "runs" / run_id / "pretrain.json").read_text())
    summary = record.get("summary", {})
    return {"hardware": record.get("hardware"), "validation": record.get("validation"),
            "final_loss": summary.get("final_loss"), "steps": summary.get("steps"),
            "tokens_per_s": summary.get("tokens_per_s"), "train_seconds": summary.get("train_seconds")}


def _finetune_numbers(root: Path, run_id: str, family: str) -> dict[str, Any]:
    record = json.loads((root / "results" / PROFILE / "runs" / run_id / f"{family}.json").read_text())
    return {"hardware": record.get("hardware"), "seconds": record.get("timing", {}).get("seconds"),
            "results": [{"task": r.get("task"), "seed": r.get("seed"), "metric": r.get("primary_metric"),
                         "value": r.get("primary")} for r in record.get("results", [])]}


def section_pipeline(section, ctx) -> None:
    """Section 5 (module docstring)."""
    need = (lambda kind: TINY_NEED_S) if ctx.tiny else NEED_S.get
    if section.run("setup", lambda: _setup(ctx), 1.0) is None:
        for run_id, family in PIPELINE_RUNS:
            section.skip(f"pretrain/{run_id}", "no scratch project: see the 'setup' step")
            section.skip(f"finetune/{run_id}/{family}", "no scratch project: see the 'setup' step")
        return
    root, log, params = ctx.scratch, ctx.out_dir / LOG_NAME, f"params/{PROFILE}.yaml"
    for run_id, family in PIPELINE_RUNS:
        def pretrain(r=run_id):
            done = run_leanlm(["pretrain", "--params", params, "--run", r], root, log, section.remaining())
            return {**done, **_pretrain_numbers(root, r)}

        def finetune(r=run_id, f=family):
            done = run_leanlm(["finetune", "--params", params, "--run", r, "--family", f], root, log,
                              section.remaining())
            return {**done, **_finetune_numbers(root, r, f)}

        if section.run(f"pretrain/{run_id}", pretrain, need("pretrain")) is None:
            section.skip(f"finetune/{run_id}/{family}", "its pretraining did not complete")
            continue
        section.run(f"finetune/{run_id}/{family}", finetune, need("finetune"))


def _setup(ctx) -> dict[str, Any]:
    bundle = ctx.require_bundle()
    root = Path(tempfile.mkdtemp(prefix="leanlm-gpucheck-"))
    scratch_project(root, bundle.profile_text())
    bundle.unpack_data(root / "data" / PROFILE)
    ctx.scratch = root
    return {"scratch": str(root), "profile": PROFILE, "runs": [list(r) for r in PIPELINE_RUNS],
            "log": str(ctx.out_dir / LOG_NAME)}
