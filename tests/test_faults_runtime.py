"""Faults at run time end in a clear error or an exact resume (issue 16, items 4, 7, 9, 10 and the
battery's runtime cases): damaged checkpoint bytes are refused by name; a read-only or full disk names
the path and leaves no output half-written; a killed (kill -9 or Ctrl-C) pretraining or fine-tuning job
resumes to the very result of an uninterrupted one (tests/test_kill_resume.py); two jobs on one run fail
fast; outputs are group-readable; build_once works on file systems without flock.

Full and read-only disks are real tmpfs mounts (tests that need to mount skip where the user may not)."""

from __future__ import annotations

import errno
import os
import random
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leanlm import paths
from leanlm.config import load_config
from leanlm.errors import OutputError, TrainingError
from leanlm.io import atomic_path, write_error
from leanlm.scratch import build_once
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
    from leanlm.stages.pretrain import pretrain

    root = _tiny(scratch_root)
    mount_tmpfs(root / "results", "ro,size=64k")
    with pytest.raises(OutputError) as err:
        pretrain(load_config("params/smoke.yaml"), RUN)
    assert str(paths.results_dir("smoke") / "runs" / RUN) in str(err.value) and "read-only" in str(err.value)
    assert not (paths.models_dir("smoke") / RUN / WEIGHTS_NAME).exists()


def test_results_turning_read_only_after_training_publish_nothing(scratch_root, mount_tmpfs, monkeypatch):
    """The issue's case: training ends, then the record cannot be written. Before, model.safetensors was
    left without pretrain.json and a raw OSError; now neither is published and the error names the path."""
    from leanlm.stages import pretrain as pretrain_module

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
    from leanlm.stages.pretrain import pretrain

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
