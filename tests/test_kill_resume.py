"""Killed jobs resume exactly (issue 16, items 9 and 10's neighbours; issue 13's kill before Snakemake
records the outputs): a pretraining job killed with kill -9 or Ctrl-C resumes to the very model of an
uninterrupted run; a killed fine-tuning job keeps its finished (task, seed) results and ends with the same
JSON; a kill mid-task resumes from the task's checkpoint. The jobs run as real ``leanlm`` processes on the
tiny profile of tests/test_faults_runtime.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leanlm import paths
from leanlm.config import load_config
from leanlm.modeling.checkpoint import WEIGHTS_NAME
from leanlm.training import checkpointing
from leanlm.training.engine import Trainer
from test_faults_runtime import RUN, _tiny  # noqa: E402  (tests/ is on sys.path)

CLI = "import sys; from leanlm.cli import main; sys.exit(main(sys.argv[1:]))"


def _leanlm(root: Path, *args: str) -> subprocess.Popen:
    """``leanlm <args>`` as its own process in the scratch project (one thread, no warm server)."""
    env = {**os.environ, "LEANLM_ROOT": str(root), "OMP_NUM_THREADS": "1", "LEANLM_FORKSERVER": "off",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1] / "workflow"),
                                                       os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", CLI, *args, "--params", "params/smoke.yaml"], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_in_a_terminal)


def _as_in_a_terminal() -> None:
    """SIGINT handled as Ctrl-C in a terminal reaches a foreground job. A test run started in the background
    by a non-interactive shell (`cmd &`) inherits SIGINT ignored, and so did the job: it then trained to
    the end and exited 0 (the SIGINT case failed that way in such CI runs, and passed from a terminal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def _kill_when(proc: subprocess.Popen, ready, sig: int, timeout: float = 300) -> None:
    """Send ``sig`` to ``proc`` while ``ready()`` holds; fail if the job ends first.

    The job is frozen (SIGSTOP) while ``ready()`` is checked again and the signal sent, then thawed: on a
    loaded machine the test process can be descheduled between a plain check and the send, and the signal
    would then reach a job that has already published its outputs, testing nothing.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the job ended before it could be killed:\n{proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the job never reached the point to kill it at")
        if ready():
            proc.send_signal(signal.SIGSTOP)
            _until_stopped(proc)
            try:
                if ready():
                    proc.send_signal(sig)
                    break
            finally:
                proc.send_signal(signal.SIGCONT)
        time.sleep(0.005)
    proc.communicate(timeout=60)
    assert proc.returncode != 0


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _until_stopped(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Wait until the kernel shows ``proc`` stopped (state T): SIGSTOP is delivered asynchronously, and a job
    inside a system call (the rename that publishes an output) finishes it first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(proc.pid) in (None, "T", "t", "Z"):  # None: gone, the caller's next poll() says so
            return
        time.sleep(0.001)


def _without_timing(obj):
    """A record without what differs between two identical runs: wall-clock times."""
    drop = {"timing", "train_seconds", "inference_seconds", "inference_seconds_per_sample", "seconds"}
    if isinstance(obj, dict):
        return {k: _without_timing(v) for k, v in obj.items() if k not in drop}
    if isinstance(obj, list):
        return [_without_timing(v) for v in obj]
    return obj


def _same_json(a: Path, b: Path) -> None:
    # Compared as text: NaN metrics are equal as text, never as floats.
    text = lambda p: json.dumps(_without_timing(json.loads(p.read_text())), sort_keys=True)  # noqa: E731
    assert text(a) == text(b)


# ----------------------------------------------------------- kill -9 / Ctrl-C resume of pretraining
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_pretraining_resumes_to_the_same_model(scratch_root, sig):
    steps = 400
    root = _tiny(scratch_root, steps=steps, checkpoint_every=10)
    model_dir, record = paths.models_dir("smoke") / RUN, paths.results_dir("smoke") / "runs" / RUN / "pretrain.json"
    _finish(_leanlm(root, "pretrain", "--run", RUN))
    straight_weights, straight = (model_dir / WEIGHTS_NAME).read_bytes(), json.loads(record.read_text())
    for path in (model_dir / WEIGHTS_NAME, model_dir / "config.json", record):
        path.unlink()

    meta = model_dir / "checkpoint" / checkpointing.META_FILE
    _kill_when(_leanlm(root, "pretrain", "--run", RUN),
               lambda: meta.is_file() and not record.exists() and not (model_dir / WEIGHTS_NAME).exists(), sig)
    assert not record.exists() and not (model_dir / WEIGHTS_NAME).exists()  # nothing half-published
    _finish(_leanlm(root, "pretrain", "--run", RUN))
    resumed = json.loads(record.read_text())
    assert 0 < resumed["summary"]["resumed_from"] < steps
    assert (model_dir / WEIGHTS_NAME).read_bytes() == straight_weights
    assert resumed["history"] == straight["history"]
    assert resumed["validation"] == straight["validation"]
    assert resumed["summary"]["final_loss"] == straight["summary"]["final_loss"]
    assert not (model_dir / "checkpoint").exists()


# ------------------------------------------------------------- item 9: killed fine-tuning keeps work
def test_killed_finetuning_keeps_finished_results_and_ends_the_same(scratch_root):
    from leanlm.stages.pretrain import pretrain

    root = _tiny(scratch_root, tasks=("mrpc", "stsb"), seeds=(3, 4), epochs=2)
    pretrain(load_config("params/smoke.yaml"), RUN)
    out = paths.results_dir("smoke") / "runs" / RUN / "glue.json"
    parts = paths.results_dir("smoke") / "runs" / RUN / ".glue.parts"
    _finish(_leanlm(root, "finetune", "--run", RUN, "--family", "glue"))
    assert not parts.exists()  # the per-task results are gone once the family's JSON is written
    straight = out.rename(out.with_name("straight.json"))

    _kill_when(_leanlm(root, "finetune", "--run", RUN, "--family", "glue"),
               lambda: len(list(parts.glob("*.json"))) >= 2 and not out.exists(), signal.SIGKILL)
    kept = sorted(p.name for p in parts.glob("*.json"))
    assert not out.exists() and 2 <= len(kept) < 4 and kept[:2] == ["mrpc-seed3.json", "mrpc-seed4.json"]
    log = _finish(_leanlm(root, "finetune", "--run", RUN, "--family", "glue"))
    assert log.count("finished by an earlier job") == len(kept)
    _same_json(straight, out)
    assert [(r["task"], r["seed"]) for r in json.loads(out.read_text())["results"]] == [
        ("mrpc", 3), ("mrpc", 4), ("stsb", 3), ("stsb", 4)]


class Killed(Exception):
    pass


def test_finetuning_killed_mid_task_resumes_from_its_checkpoint(scratch_root, monkeypatch):
    from leanlm.stages import finetune as ft
    from leanlm.stages.pretrain import pretrain

    _tiny(scratch_root, tasks=("mrpc",), seeds=(3,), epochs=3)
    config = load_config("params/smoke.yaml")
    pretrain(config, RUN)
    out = paths.results_dir("smoke") / "runs" / RUN / "glue.json"
    ft.finetune(config, RUN, "glue")
    straight = out.rename(out.with_name("straight.json"))

    steps_per_epoch = 3  # 24 training rows, batches of 8
    real_call = ft.TaskBatches.__call__

    def dies_in_epoch_3(self, step, micro):
        if step == 2 * steps_per_epoch + 1:
            raise Killed()
        return real_call(self, step, micro)

    monkeypatch.setattr(ft.TaskBatches, "__call__", dies_in_epoch_3)
    with pytest.raises(Killed):
        ft.finetune(config, RUN, "glue")
    scratch = paths.models_dir("smoke") / RUN / "finetune" / "mrpc-seed3"
    assert json.loads((scratch / "checkpoint" / "meta.json").read_text())["step"] == 2 * steps_per_epoch
    monkeypatch.setattr(ft.TaskBatches, "__call__", real_call)
    seen = []
    real_init = Trainer.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        seen.append(self.resumed_from)

    monkeypatch.setattr(Trainer, "__init__", spy)
    ft.finetune(config, RUN, "glue")
    assert seen == [2 * steps_per_epoch]
    _same_json(straight, out)
    assert not scratch.exists()


def test_part_made_under_other_settings_is_not_reused(scratch_root):
    from leanlm.stages import finetune as ft

    part = scratch_root / "mrpc-seed3.json"
    key = {"settings": {"lr": 1e-3}, "seeds": [3], "model": {}, "task": "mrpc", "seed": 3}
    ft.write_json(part, {"key": ft.part_key(key), "result": {"primary": 0.5}})
    assert ft.finished_result(part, key) == {"primary": 0.5}
    assert ft.finished_result(part, {**key, "settings": {"lr": 2e-3}}) is None
    assert ft.finished_result(part, {**key, "model": {"config_sha256": "other"}}) is None
    part.write_text("{half a json")
    assert ft.finished_result(part, key) is None


# ------------------------- a kill after training, before Snakemake records the outputs (issue 13)
def _descendants_ended(pid: int) -> bool:
    """Whether every child of ``pid`` has exited (a zombie: its stopped parent cannot reap it)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return True
    return all(_state(int(child)) in ("Z", None) for child in children)


def test_a_kill_before_snakemake_records_the_outputs_does_not_retrain_from_step_0(scratch_root, monkeypatch):
    """A real Snakemake runs the pretrain rule; the moment the job has written its outputs Snakemake is
    stopped (SIGSTOP), the job is let finish, and Snakemake is killed: the outputs exist but Snakemake never
    recorded them, as when a node or a login session dies at that instant. The job must have left its
    checkpoint, so the rerun Snakemake makes of the incomplete job starts at the last step, not step 0, and
    ends with the same model; once Snakemake has recorded the outputs the checkpoint is deleted."""
    from test_faults import snakemake, workflow_project

    monkeypatch.setenv("LEANLM_FORKSERVER", "off")  # each job its own process, Snakemake's child
    steps = 30
    root = workflow_project(_tiny(scratch_root, steps=steps, checkpoint_every=10))
    (paths.data_dir("smoke") / "raw").mkdir(parents=True)
    model_dir, record = paths.models_dir("smoke") / RUN, paths.results_dir("smoke") / "runs" / RUN / "pretrain.json"
    target = f"models/smoke/{RUN}/model.safetensors"
    env = {**os.environ, "LEANLM_ROOT": str(root), "LEANLM_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"}
    snake = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", target], cwd=root, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not record.exists():
            assert snake.poll() is None, f"snakemake ended before the job wrote its outputs:\n{snake.stderr.read()}"
            assert time.monotonic() < deadline, "the pretraining job never wrote its outputs"
            time.sleep(0.005)
        os.kill(snake.pid, signal.SIGSTOP)
        while not _descendants_ended(snake.pid):  # the job runs on to its end; Snakemake cannot see it
            assert time.monotonic() < deadline, "the pretraining job did not end"
            time.sleep(0.05)
    finally:
        if snake.poll() is None:
            os.killpg(snake.pid, signal.SIGKILL)
        snake.communicate(timeout=60)
    first_weights = (model_dir / WEIGHTS_NAME).read_bytes()
    first = json.loads(record.read_text())
    assert first["summary"]["resumed_from"] is None
    assert (model_dir / "checkpoint" / checkpointing.STATE_FILE).is_file(), "the job deleted its checkpoint"

    assert snakemake(root, "--unlock").returncode == 0  # the killed Snakemake's lock on the folder
    finetuned = f"results/smoke/runs/{RUN}/glue.json"
    proc = snakemake(root, "--cores", "1", finetuned)  # the rerun of the pretraining, then a fine-tuning job
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(record.read_text())
    assert again["summary"]["resumed_from"] == steps  # from the final checkpoint: no step trained again
    assert (model_dir / WEIGHTS_NAME).read_bytes() == first_weights
    assert again["history"] == first["history"] and again["validation"] == first["validation"]
    # Recorded now: the fine-tuning job, which Snakemake starts only after recording the pretraining it reads,
    # deleted the checkpoint at its start (the Snakefile's hooks would have at the end of the run).
    assert "removed the training checkpoint of the finished pretraining" in (
        root / "logs" / "smoke" / "finetune" / RUN / "glue.log").read_text()
    assert not (model_dir / "checkpoint").exists()
    assert "Nothing to be done" in snakemake(root, "-n", finetuned).stdout


def test_pretrain_outputs_are_the_rules():
    rule = (Path(__file__).parents[1] / "workflow" / "rules" / "pretrain.smk").read_text()
    declared = re.findall(r'^\s+\w+="([^"]+)",$', rule.split("output:")[1].split("params:")[0], re.M)
    assert paths.pretrain_outputs("smoke", RUN) == [p.format(profile="smoke", run_id=RUN) for p in declared]


def test_checkpoint_folder_names_agree():
    from leanlm.snakemake_records import _checkpoint_names

    assert _checkpoint_names() == (checkpointing.CHECKPOINT_DIR, checkpointing._PARTIAL, checkpointing._PREVIOUS)
