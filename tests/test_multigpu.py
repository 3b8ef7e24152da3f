"""The multi-GPU command of the README and docs/cluster.md, run verbatim with 2 CPU processes (gloo), against one process.

A profile's batch is the global batch (DESIGN §8): the same profile on 1 and on 2 processes must make the
same optimisation. The command is taken from the docs (only the process count, profile and run are put
in; every flag, and its order, is the docs'), run on a tiny smoke profile without dropout (dropout draws
differ per process) and with grad_accum 2, and compared with the one-process run of the same profile:
losses and final weights within rtol 1e-5 (the runs differ only in the order gradients are summed), and
the outputs written once, by rank 0 (pretrain.json says world_size 2).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)
from test_loss_baselines import tiny_smoke  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[1]
RTOL, ATOL = 1e-5, 1e-7
# The docs' command, with its three values captured (process count, profile, run).
COMMAND = re.compile(r"`(torchrun --standalone --nproc-per-node (\d+) -m leanlm\.cli -- pretrain "
                     r"--params (\S+) --run ([\w.-]+))`")


def readme_command() -> tuple[str, str, str, str]:
    """The torchrun command as README.md and docs/cluster.md show it: once in each, the same in both."""
    found = {name: COMMAND.findall((REPO / name).read_text(encoding="utf-8")) for name in ("README.md", "docs/cluster.md")}
    assert all(len(shown) == 1 for shown in found.values()), (
        f"README.md and docs/cluster.md should each show the torchrun command once in the tested form; found {found}")
    (readme,), (cluster,) = found.values()
    assert readme == cluster, f"README.md and docs/cluster.md show different torchrun commands: {found}"
    return readme


def _profile(root: Path, grad_accum: int) -> None:
    def change(doc):
        doc["experiments"] = ["ch3_encoder"]
        for model in doc["models"].values():
            if isinstance(model, dict) and "dropout" in model:
                model.update(dropout=0.0, attention_dropout=0.0)
        # checkpoints every 2 steps: written by rank 0 alone, removed at the end
        doc["pretrain"]["mlm"].update(grad_accum=grad_accum, checkpoint_every=2)

    edit_yaml(root / "params/smoke.yaml", change)


# Loaded by every process of the test's runs (sitecustomize on PYTHONPATH): a Python audit hook that notes
# each file a process opens for writing under the run's models/ or results/ folders, with its rank, so
# the test sees which processes wrote the outputs, the checkpoint and the run lock. A thread-shutdown hook
# also notes, in finalized.txt, every process that reaches interpreter finalization, with the native
# threads still running then: a gloo worker thread alive at that point can abort the process (see
# leanlm.process_end).
WRITE_WATCH = """
import os, sys, threading
_log = os.environ["LEANLM_TEST_WRITE_LOG"]
_final = os.path.join(os.path.dirname(_log), "finalized.txt")
_roots = tuple(os.path.join(os.environ["LEANLM_ROOT"], d) for d in ("models", "results"))
def _finalizing():
    # threading runs this as the interpreter begins to finalize (Py_FinalizeEx's thread shutdown, before
    # atexit), never when a process ends with os._exit as leanlm's end_process does.
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
            names.append(comm.read().strip())
    with open(_final, "a", encoding="utf-8") as out:
        out.write(f"{os.environ.get('RANK', '-')} {','.join(sorted(names))}\\n")
threading._register_atexit(_finalizing)
def _hook(event, args):
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    mode, flags = args[1] or "", args[2] or 0
    path = os.path.abspath(os.fsdecode(args[0]))
    if path.startswith(_roots) and (any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)):
        with open(_log, "a", encoding="utf-8") as out:
            out.write(os.environ.get("RANK", "-") + " " + path + "\\n")
sys.addaudithook(_hook)
"""


def _env(root: Path, watch: Path) -> dict:
    watch.mkdir(exist_ok=True)
    (watch / "sitecustomize.py").write_text(WRITE_WATCH)
    env = {k: v for k, v in os.environ.items() if k not in ("LEANLM_FORKSERVER", "WORLD_SIZE", "RANK")}
    env.update(PYTHONPATH=f"{watch}{os.pathsep}{REPO / 'workflow'}", LEANLM_ROOT=str(root), OMP_NUM_THREADS="1",
               LEANLM_TEST_WRITE_LOG=str(watch / "writes.txt"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def _writers(watch: Path) -> dict[str, set[str]]:
    """Rank -> the files it opened for writing (and clears the log)."""
    log = watch / "writes.txt"
    out: dict[str, set[str]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        rank, path = line.split(" ", 1)
        out.setdefault(rank, set()).add(path)
    log.unlink(missing_ok=True)
    return out


def _finalized(watch: Path) -> dict[str, list[str]]:
    """Rank -> the native threads running when that process's interpreter began to finalize (a process
    that ended through leanlm's end_process, without finalizing, is absent), and clears the record."""
    log = watch / "finalized.txt"
    out = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        rank, threads = line.split(" ", 1)
        out[rank] = threads.split(",")
    log.unlink(missing_ok=True)
    return out


def _outputs(root: Path, run: str) -> tuple[dict, dict]:
    record = json.loads((root / "results/smoke/runs" / run / "pretrain.json").read_text())
    weights = load_file(root / "models/smoke" / run / "model.safetensors")
    return record, weights


def test_readme_torchrun_command_matches_one_process(tiny_smoke):  # noqa: F811
    root = tiny_smoke
    command, _, params, run = readme_command()
    _profile(root, grad_accum=2)
    env = _env(root, root / "watch")
    one = subprocess.run([sys.executable, "-m", "leanlm.cli", "pretrain", "--params", "params/smoke.yaml",
                          "--run", run], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    single, single_weights = _outputs(root, run)
    assert set(_writers(root / "watch")) == {"-"}  # one process, no torchrun (no RANK)
    # The watch sees a finalizing process (so its silence below means something), with no gloo thread.
    assert list(_finalized(root / "watch")) == ["-"]
    for folder in ("models/smoke", "results/smoke/runs"):
        shutil.rmtree(root / folder / run)

    argv = shlex.split(command)
    argv[argv.index("--nproc-per-node") + 1] = "2"
    argv[argv.index("--params") + 1] = "params/smoke.yaml"
    assert argv[argv.index("--run") + 1] == run
    two = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    double, double_weights = _outputs(root, run)
    writers = _writers(root / "watch")
    # Rank 0 alone took the run lock and wrote config.json and pretrain.json; rank 1 opened nothing there.
    assert set(writers) == {"0"}, writers
    written = " ".join(sorted(Path(p).name for p in writers["0"]))  # staged files: .<name>.<random>.tmp
    for name in (".lock", "config.json", "model.safetensors", "pretrain.json", "meta.json"):  # meta.json: the checkpoint's
        assert name in written, (name, written)

    assert single["world_size"] == 1 and double["world_size"] == 2
    assert single["pretrain"]["grad_accum"] == double["pretrain"]["grad_accum"] == 2
    assert single["summary"]["steps"] == double["summary"]["steps"] > 1
    assert double["summary"]["tokens"] == single["summary"]["tokens"]  # both ranks' tokens, counted once
    assert double["timing"]["samples_per_step"] == single["timing"]["samples_per_step"] == 8
    for key in ("final_loss", "mean_loss_last_10pct"):
        assert double["summary"][key] == pytest.approx(single["summary"][key], rel=RTOL, abs=ATOL), key
    assert [h["loss"] for h in double["history"] if "loss" in h] == pytest.approx(
        [h["loss"] for h in single["history"] if "loss" in h], rel=RTOL, abs=ATOL)
    assert double["validation"] == pytest.approx(single["validation"], rel=RTOL, abs=ATOL)
    assert single_weights.keys() == double_weights.keys()
    for name, tensor in single_weights.items():
        torch.testing.assert_close(double_weights[name], tensor, rtol=RTOL, atol=ATOL, msg=name)
    # Neither rank reached interpreter finalization with gloo's worker threads running (DDP keeps the
    # process group alive to the end, and a worker that drops a finished collective's tensors while the
    # interpreter finalizes aborts the process, in about 1 run of 10 on this machine): the ranks end
    # without finalizing. torchrun's own process (no RANK) may finalize; it joined no group.
    assert not {rank: threads for rank, threads in _finalized(root / "watch").items() if rank != "-"}
    # Written once: one process's log lines only (rank 1 logs warnings and errors only), no leftovers.
    assert two.stderr.count("final loss") == 1, two.stderr[-3000:]
    leftovers = sorted(p.name for p in (root / "models/smoke" / run).iterdir())
    assert not [n for n in leftovers if n.startswith(".") and n != ".lock" or "checkpoint" in n], leftovers


def test_process_count_must_divide_grad_accum(tiny_smoke):  # noqa: F811
    root = tiny_smoke
    command, _, _, run = readme_command()
    _profile(root, grad_accum=3)
    argv = shlex.split(command)
    argv[argv.index("--nproc-per-node") + 1] = "2"
    argv[argv.index("--params") + 1] = "params/smoke.yaml"
    done = subprocess.run(argv, cwd=root, env=_env(root, root / "watch"), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "pretrain.mlm.grad_accum" in done.stderr and "cannot be shared by 2 processes" in done.stderr, done.stderr[-3000:]
    assert not (root / "results/smoke/runs" / run / "pretrain.json").exists()


@pytest.mark.slow
def test_pipeline_rule_launches_torchrun_when_resources_ask_for_gpus(tiny_smoke):  # noqa: F811
    """The pretrain rule, run by a real local Snakemake with resources.pretrain.gpus: 2, starts torchrun
    with 2 processes (gloo on this CPU machine) and makes the run's outputs (written once, by rank 0)."""
    from test_faults import snakemake, workflow_project

    root = workflow_project(tiny_smoke)
    _profile(root, grad_accum=2)
    edit_yaml(root / "params/smoke.yaml", lambda d: d.setdefault("resources", {}).setdefault("pretrain", {})
              .update(gpus=2))
    _, _, _, run = readme_command()
    target = f"models/smoke/{run}/model.safetensors"
    shown = snakemake(root, target, "--cores", "2", "-n", "-p")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "torchrun --standalone --nproc-per-node 2 -m leanlm.cli -- pretrain" in shown.stdout, shown.stdout
    done = snakemake(root, target, "--cores", "2")
    log = root / f"logs/smoke/pretrain/{run}.log"
    assert done.returncode == 0, done.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    record, _ = _outputs(root, run)
    assert record["world_size"] == 2 and record["summary"]["steps"] > 1
    assert log.read_text().count("final loss") == 1  # rank 0 logs; rank 1 only warnings and errors
