"""Faults at run time end in a clear error or an exact resume (issue 16, items 4, 7, 9, 10 and the
battery's runtime cases): damaged checkpoint bytes are refused by name; a read-only or full disk names
the path and leaves no output half-written; a killed (kill -9 or Ctrl-C) pretraining or fine-tuning job
resumes to the very result of an uninterrupted one; two jobs on one run fail fast; outputs are
group-readable; build_once works on file systems without flock.

The jobs that are killed run as real ``leanlm`` processes on a tiny profile; full and read-only disks
are real tmpfs mounts (tests that need to mount skip where the user may not)."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from leanlm import paths
from leanlm.config import load_config
from leanlm.errors import OutputError, TrainingError
from leanlm.io import atomic_path, build_once, write_error
from leanlm.modeling.checkpoint import WEIGHTS_NAME, load_model, save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.training import checkpointing
from leanlm.training.engine import Trainer
from params_files import edit_yaml  # noqa: E402  (tests/ is on sys.path)
from test_ch2_pipeline import _texts, _write_jsonl  # noqa: E402  (the tiny ch. 2 corpus)
from test_engine import config as engine_config, fresh_model, make_batch  # noqa: E402

torch.set_num_threads(1)

RUN = "ch2_hashformers-bert_mlm"
CLI = "import sys; from leanlm.cli import main; sys.exit(main(sys.argv[1:]))"


def _tiny(root: Path, steps: int = 4, checkpoint_every=None, tasks=("mrpc", "stsb"), seeds=(3,), epochs=1):
    """A scratch smoke profile with ch. 2's BERT MLM run only, tiny sizes, and tiny data on disk."""
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece

    def shrink(doc):
        doc["experiments"] = ["ch2_hashformers"]
        doc["seeds"] = [0]
        doc["models"]["bert"].update(n_layers=1, d_model=16, n_heads=2, head_dim=8, d_ff=32, max_position=32)
        doc["pretrain"]["mlm"].update(steps=4, batch_size=4, seq_len=16, warmup_steps=1, checkpoint_every=None)
        doc["pretrain"]["shuffle_random"].update(seq_len=16)  # the matrix's other ch. 2 runs validate too
        doc["pretrain_variants"]["mlm_ch2"] = {"steps": steps, "warmup_steps": 1, "checkpoint_every": checkpoint_every}
        doc["finetune"]["glue"].update(tasks=list(tasks), batch_size=8, max_seq_len=24)
        doc["finetune_variants"]["glue_ch2"] = {"epochs": epochs, "seeds": list(seeds)}

    edit_yaml(root / "params/smoke.yaml", shrink)
    data = paths.data_dir("smoke")
    _write_jsonl(data / "corpus/train.jsonl", [{"text": t} for t in _texts(40, 30, 0)])
    _write_jsonl(data / "corpus/validation.jsonl", [{"text": t} for t in _texts(6, 30, 1)])
    texts = _texts(40, 30, 0)
    save_tokenizer(train_wordpiece(lambda: iter(texts), vocab_size=80, lowercase=True), data / "tokenizer",
                   {"kind": "wordpiece"})
    rng = random.Random(2)
    for split, n in (("train", 24), ("validation", 10), ("test", 10)):
        a, b = _texts(n, 6, len(split)), _texts(n, 5, 7)
        _write_jsonl(data / f"tasks/mrpc/{split}.jsonl",
                     [{"idx": i, "text_a": a[i], "text_b": b[i], "label": i % 2} for i in range(n)])
        _write_jsonl(data / f"tasks/stsb/{split}.jsonl",
                     [{"idx": i, "text_a": a[i], "text_b": b[i], "label": round(rng.uniform(0, 5), 2)}
                      for i in range(n)])
    return root


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


def _until_stopped(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Wait until the kernel shows ``proc`` stopped (state T): SIGSTOP is delivered asynchronously, and a job
    inside a system call (the rename that publishes an output) finishes it first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return  # gone: the caller's next poll() says so
        if state in ("T", "t", "Z"):
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


@pytest.fixture
def mount_tmpfs():
    """Mount a tmpfs (``options`` as for mount -o) at a path; unmounted again at the end."""
    mounted: list[Path] = []

    def mount(at: Path, options: str) -> Path:
        at.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(at)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs needs root: {done.stderr.decode().strip()}")
        mounted.append(at)
        return at

    yield mount
    for at in reversed(mounted):
        subprocess.run(["umount", "-l", str(at)], check=False)


# ------------------------------------------------------------------------- item 4: damaged bytes
def _flip_byte(path: Path, offset_from_end: int) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x40
    path.write_bytes(bytes(data))


def test_damaged_training_checkpoint_is_refused_naming_the_file(tmp_path):
    Trainer(fresh_model(), engine_config(total_steps=4, checkpoint_every=2), make_batch, tmp_path).fit()
    state = tmp_path / "checkpoint" / checkpointing.STATE_FILE
    # Damage a byte inside a tensor: the zip container stays valid, so torch itself loads it silently.
    raw = state.read_bytes()
    weights = next(iter(torch.load(state, weights_only=True)["model"].values()))
    needle = weights.numpy().tobytes()[:16]
    at = raw.index(needle)
    state.write_bytes(raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1:])
    assert isinstance(torch.load(state, weights_only=True), dict)  # what went unnoticed before
    with pytest.raises(TrainingError) as err:
        Trainer(fresh_model(), engine_config(total_steps=4, checkpoint_every=2), make_batch, tmp_path)
    message = str(err.value)
    assert str(state) in message and "damaged" in message and "SHA-256" in message
    assert f"Delete the folder {state.parent}" in message


def test_truncated_training_checkpoint_is_a_clear_error(tmp_path):
    Trainer(fresh_model(), engine_config(total_steps=4, checkpoint_every=2), make_batch, tmp_path).fit()
    state = tmp_path / "checkpoint" / checkpointing.STATE_FILE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # a killed copy
    with pytest.raises(TrainingError, match=rf"{re.escape(str(state))}: the file is damaged.*Delete the folder"):
        checkpointing.load_checkpoint(tmp_path)


def test_checkpoint_without_its_checksum_record_is_refused(tmp_path):
    Trainer(fresh_model(), engine_config(total_steps=4, checkpoint_every=2), make_batch, tmp_path).fit()
    (tmp_path / "checkpoint" / checkpointing.META_FILE).unlink()
    with pytest.raises(TrainingError, match="meta.json, which holds its checksum, is missing"):
        checkpointing.load_checkpoint(tmp_path)


def _tiny_model():
    config = ModelConfig.from_dict({"vocab_size": 50, "d_model": 16, "n_layers": 1, "n_heads": 2, "head_dim": 8,
                                    "d_ff": 32, "max_position": 16})
    return build_model(config, "mlm"), config


def test_damaged_model_weights_are_refused_naming_the_file(tmp_path):
    model, config = _tiny_model()
    save_checkpoint(model, config, tmp_path)
    load_model(tmp_path)  # intact: loads
    _flip_byte(tmp_path / WEIGHTS_NAME, 5)  # inside the last tensor's data
    from safetensors.torch import load_file

    load_file(str(tmp_path / WEIGHTS_NAME))  # safetensors itself does not notice
    with pytest.raises(TrainingError) as err:
        load_model(tmp_path)
    assert f"{tmp_path / WEIGHTS_NAME} are damaged" in str(err.value) and "Delete" in str(err.value)


# -------------------------------------------------------------- permissions, flock-less file systems
def test_outputs_are_group_readable_whatever_the_writer_does(tmp_path):
    old = os.umask(0o022)
    try:
        model, config = _tiny_model()
        save_checkpoint(model, config, tmp_path)  # safetensors writes its file anew
        with atomic_path(tmp_path / "x.bin") as tmp:
            tmp.unlink()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)  # a writer that makes a private file
            os.close(fd)
    finally:
        os.umask(old)
    for name in (WEIGHTS_NAME, "config.json", "x.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_build_once_and_run_lock_work_without_flock(tmp_path, monkeypatch, code):
    import fcntl

    def no_flock(fd, operation):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    target = tmp_path / "stream.bin"
    assert build_once(target, lambda: target.write_text("built")) is True
    assert target.read_text() == "built"
    with checkpointing.run_lock(tmp_path / "run", "r"):
        pass


def test_other_flock_errors_still_raise(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setattr(fcntl, "flock", lambda fd, op: (_ for _ in ()).throw(OSError(errno.EBADF, "bad")))
    with pytest.raises(OSError):
        build_once(tmp_path / "t", lambda: None)


# ------------------------------------------------------------------ item 7: full and read-only disk
@pytest.mark.parametrize("code, why", [(errno.ENOSPC, "the disk is full"), (errno.EROFS, "read-only"),
                                       (errno.EACCES, "permission denied")])
def test_write_errors_say_which_path_and_why(tmp_path, code, why):
    error = write_error(tmp_path / "out.json", OSError(code, os.strerror(code), str(tmp_path / ".out.json.x")))
    assert isinstance(error, OutputError) and isinstance(error, OSError)
    assert str(tmp_path / "out.json") in str(error) and why in str(error)


def test_checkpoint_on_a_full_disk_names_the_folder(tmp_path, mount_tmpfs):
    run_dir = mount_tmpfs(tmp_path / "run", "size=4k")
    with pytest.raises(TrainingError) as err:
        Trainer(fresh_model(), engine_config(total_steps=4, checkpoint_every=2), make_batch, run_dir).fit()
    message = str(err.value)
    assert "could not write the checkpoint of step 2" in message and str(run_dir / "checkpoint") in message
    assert "the disk is full" in message
    assert sorted(p.name for p in run_dir.iterdir()) == []  # the partial folder is gone


def test_atomic_write_on_a_full_disk_leaves_nothing(tmp_path, mount_tmpfs):
    disk = mount_tmpfs(tmp_path / "disk", "size=4k")
    with pytest.raises(OutputError, match=rf"cannot write {re.escape(str(disk / 'big.bin'))}: the disk is full"):
        with atomic_path(disk / "big.bin") as tmp:
            tmp.write_bytes(b"x" * 65536)
    assert list(disk.iterdir()) == []


def test_read_only_results_fail_before_training(scratch_root, mount_tmpfs):
    from leanlm.training.pretrain import pretrain

    root = _tiny(scratch_root)
    mount_tmpfs(root / "results", "ro,size=64k")
    with pytest.raises(OutputError) as err:
        pretrain(load_config("params/smoke.yaml"), RUN)
    assert str(paths.results_dir("smoke") / "runs" / RUN) in str(err.value) and "read-only" in str(err.value)
    assert not (paths.models_dir("smoke") / RUN / WEIGHTS_NAME).exists()


def test_results_turning_read_only_after_training_publish_nothing(scratch_root, mount_tmpfs, monkeypatch):
    """The issue's case: training ends, then the record cannot be written. Before, model.safetensors was
    left without pretrain.json and a raw OSError; now neither is published and the error names the path."""
    from leanlm.training import pretrain as pretrain_module

    root = _tiny(scratch_root)
    results = mount_tmpfs(root / "results", "size=64k")
    real_fit = Trainer.fit

    def fit_then_read_only(self):
        summary = real_fit(self)
        subprocess.run(["mount", "-o", "remount,ro", str(results)], check=True)
        return summary

    monkeypatch.setattr(Trainer, "fit", fit_then_read_only)
    with pytest.raises(OutputError) as err:
        pretrain_module.pretrain(load_config("params/smoke.yaml"), RUN)
    record = paths.results_dir("smoke") / "runs" / RUN / "pretrain.json"
    assert str(record) in str(err.value) and "read-only" in str(err.value)
    model_dir = paths.models_dir("smoke") / RUN
    assert not record.exists() and not (model_dir / WEIGHTS_NAME).exists()
    assert not (model_dir / "config.json").exists()


# ---------------------------------------------------------------- item 10: one job per run at a time
def test_second_job_on_a_run_fails_fast_naming_the_holder(scratch_root):
    from leanlm.training.pretrain import pretrain

    root = _tiny(scratch_root)
    run_dir = paths.models_dir("smoke") / RUN
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from leanlm.training.checkpointing import run_lock\n"
         "with run_lock(sys.argv[1], sys.argv[2]):\n    print('locked', flush=True); time.sleep(120)",
         str(run_dir), RUN], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "workflow")})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(TrainingError, match=rf"run {RUN} is already being trained by process {holder.pid} on host"):
            pretrain(load_config("params/smoke.yaml"), RUN)
        assert not (run_dir / ".checkpoint.partial").exists() and not (run_dir / WEIGHTS_NAME).exists()
    finally:
        holder.kill()
        holder.wait()
    # The kernel drops a killed holder's lock: the run can go on at once.
    pretrain(load_config("params/smoke.yaml"), RUN)
    assert (run_dir / WEIGHTS_NAME).is_file()
    del root


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
    from leanlm.training.pretrain import pretrain

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
    from leanlm.training import finetune as ft
    from leanlm.training.pretrain import pretrain

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
    from leanlm.training import finetune as ft

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


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


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
