"""``leanlm gpu-check`` (docs/gpu-check.md) cannot break before it reaches a GPU.

- The CI command, ``leanlm gpu-check --device cpu --tiny --out DIR``, run as a subprocess with every
  installed distribution the GPU machine lacks (and the bundle does not carry) made unimportable: every
  section runs, each sub-step has the keys docs/gpu-check.md documents, the twins pass against a fresh
  reference, the pipeline's commands run on a fresh tiny bundle (packaged data from fake wheels).
- A failing sub-step is recorded (type, message, traceback; out-of-memory as ``oom``) and the next runs.
- A tiny ``--budget-s`` records skips instead of running past it; shares carry unused time forward.
- Section 4's comparison fails a twin that computes something else.
- What travels: the carried wheels, the device command (it parses), a changed bundle is refused.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from fake_wheels import pin_fake_wheels, write_fake_wheels
from leanlm.benchmarks.gpucheck import check, device, protocol, record as rec

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "gpu-check.md"

# Installed here but not on the device (nor carried): importing one fails in the check's process and in
# every command it starts, as it would there.
SITECUSTOMIZE = '''
import importlib.machinery, sys
BLOCKED = frozenset({blocked!r})
class _DevicePathFinder(importlib.machinery.PathFinder):
    # sys.path's finder, blind to what the GPU machine lacks: import fails, importlib.util.find_spec is None
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)
sys.meta_path[:] = [_DevicePathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


def _device_like_env(tmp: Path) -> dict[str, str]:
    site = tmp / "device_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=sorted(device.absent_on_device())))
    write_fake_wheels(tmp / "cache" / "packages")  # the packaged source's wheels, offline
    env = {k: v for k, v in os.environ.items() if k not in ("LEANLM_ROOT", "PYTHONPATH")}
    env.update(LEANLM_CACHE=str(tmp / "cache"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(site), str(REPO / "workflow")]),
               **pin_fake_wheels(tmp / "cache" / "packages"))  # the fetch checks every wheel against its pin
    return env


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The CI command, once: (completed process, gpu_check.json, wall seconds)."""
    tmp = tmp_path_factory.mktemp("gpucheck")
    out = tmp / "out"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "leanlm.cli", "gpu-check", "--device", "cpu", "--tiny",
                           "--out", str(out)], cwd=REPO, env=_device_like_env(tmp), capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads((out / rec.RECORD_NAME).read_text()), wall


def _documented_keys() -> list[tuple[str, str]]:
    """(sub-step pattern, key) rows of docs/gpu-check.md's sub-step table."""
    rows = []
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|", line)
        if match and "/" in match.group(1):
            rows.append((match.group(1), match.group(2)))
    return rows


def test_tiny_check_runs_every_section_on_the_device_packages(tiny_run):
    done, doc, wall = tiny_run
    print(f"tiny check: {wall:.0f} s wall")  # measured, not asserted
    assert doc["finished"] and doc["tiny"] and doc["device_requested"] == "cpu"
    assert set(doc["sections"]) == set(check.SECTION_NAMES)
    statuses = {f"{s}/{step}": e["status"] for s, body in doc["sections"].items() for step, e in body["steps"].items()}
    compiled = {k for k in statuses if k.endswith("_compiled")}
    assert compiled == {"bert/mha_compiled", "bert/mhe_mul_compiled"}
    assert {statuses[k] for k in compiled} == {"skipped"}
    assert all(s == "ok" for k, s in statuses.items() if k not in compiled), statuses
    for name in ("bert", "qwen"):
        twin = doc["sections"]["correctness"]["steps"][f"twin/{name}"]
        assert twin["passed"] and twin["rebuilt_batches_equal_stored"], twin
        assert len(twin["losses"]) == len(twin["twin_losses"]) == twin["steps"]
    assert doc["sections"]["correctness"]["steps"]["reference"]["fresh"]
    steps = doc["sections"]["pipeline"]["steps"]
    for run_id, family in check_pipeline_runs():
        assert steps[f"pretrain/{run_id}"]["final_loss"] > 0
        assert steps[f"finetune/{run_id}/{family}"]["results"], family
    assert "gpu-check: " in done.stdout and "section/step" in done.stdout  # the summary table, printed last


def check_pipeline_runs():
    from leanlm.benchmarks.gpucheck.pipeline import PIPELINE_RUNS

    return PIPELINE_RUNS


def test_every_documented_key_is_in_the_record(tiny_run):
    _, doc, _ = tiny_run
    rows = _documented_keys()
    assert len(rows) > 30, "docs/gpu-check.md's sub-step table was not found"
    steps = {f"{s}/{step}": e for s, body in doc["sections"].items() for step, e in body["steps"].items()}
    for pattern, key in rows:
        matched = [name for name, entry in steps.items() if fnmatch.fnmatch(name, pattern) and entry["status"] == "ok"]
        assert matched, f"docs name sub-steps {pattern!r}, the tiny record has none that ran"
        for name in matched:
            assert key in steps[name], f"{name} lacks documented key {key!r}"
    sections = {(s, k) for s, body in doc["sections"].items() for k in body}
    for section, key in (("bert", "flops_counted"), ("decoder", "flops_counted"), ("decoder", "largest_runs")):
        assert (section, key) in sections


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_failing_substep_is_recorded_and_the_next_one_runs(tmp_path):
    clock, lines = FakeClock(), []
    record = rec.CheckRecord(tmp_path, {}, 100.0, {"a": 1.0}, clock=clock, echo=lines.append)
    section = record.section("a", "A")

    def boom():
        clock.now += 2.0
        raise ValueError("a sub-step broke")

    assert section.run("first", boom, 1.0) is None
    assert section.run("second", lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB")), 1.0) is None
    assert section.run("third", lambda: {"value": 3}, 1.0) == {"value": 3}
    saved = json.loads((tmp_path / rec.RECORD_NAME).read_text())["sections"]["a"]["steps"]
    assert saved["first"]["status"] == "error" and saved["first"]["seconds"] == 2.0
    assert saved["first"]["error"]["type"] == "ValueError" and saved["first"]["error"]["message"] == "a sub-step broke"
    assert any("boom" in line for line in saved["first"]["error"]["traceback"])
    assert saved["second"]["status"] == "oom" and "out of memory" in saved["second"]["error"]["message"]
    assert saved["third"] == {"status": "ok", "seconds": 0.0, "value": 3}
    assert lines[0].startswith("gpu-check a/first: error (2.0 s): a sub-step broke")


def test_a_command_that_outlasts_its_time_is_killed_and_recorded_as_timeout(tmp_path):
    from leanlm.benchmarks.gpucheck.pipeline import run_leanlm

    record = rec.CheckRecord(tmp_path, {}, 100.0, {"a": 1.0}, echo=lambda _: None)
    section = record.section("a", "A")
    log = tmp_path / "pipeline.log"
    # Importing torch alone takes longer than 0.3 s: the command is killed, its process group with it.
    slow = ["gpu-check", "--device", "cpu", "--tiny", "--sections", "1", "--out", str(tmp_path / "inner")]
    assert section.run("slow", lambda: run_leanlm(slow, tmp_path, log, timeout=0.3), 0.0) is None
    entry = record.doc["sections"]["a"]["steps"]["slow"]
    assert entry["status"] == "timeout" and "outlasted the 0 s left" in entry["error"]["message"]
    assert log.read_text().startswith("\n$ leanlm gpu-check --device cpu")
    assert not (tmp_path / "inner" / rec.RECORD_NAME).exists()


def test_a_failing_substep_of_the_real_check_leaves_the_others_running(tmp_path, monkeypatch):
    from leanlm.benchmarks.gpucheck import environment

    def broken(device, n):
        raise RuntimeError("the matmul failed")

    monkeypatch.setattr(environment, "matmul_rate", broken)
    monkeypatch.setattr(environment, "sdpa_kernels", lambda device, tiny: {"cases": {}, "by_kernel": {}})
    doc = check.run_check(tmp_path, "cpu", True, 60.0, ("environment",), None, ["test"], echo=lambda _: None)
    steps = doc["sections"]["environment"]["steps"]
    assert steps["matmul"]["status"] == "error" and steps["matmul"]["error"]["message"] == "the matmul failed"
    assert steps["environment"]["status"] == "ok" and steps["sdpa_kernels"]["status"] == "ok"
    assert json.loads((tmp_path / rec.RECORD_NAME).read_text())["finished"]


def test_shares_carry_unused_time_and_a_step_that_would_not_fit_is_skipped(tmp_path):
    clock = FakeClock()
    record = rec.CheckRecord(tmp_path, {}, 100.0, {"a": 0.25, "b": 0.75}, clock=clock, echo=lambda _: None)
    a = record.section("a", "A")
    assert a.remaining() == 25.0
    clock.now = 5.0  # section a used 5 of its 25 s: b may use its 75 and a's 20 left
    b = record.section("b", "B")
    assert b.remaining() == 95.0
    assert b.run("long", lambda: {}, 96.0) is None
    skipped = record.doc["sections"]["b"]["steps"]["long"]
    assert skipped["status"] == "skipped" and skipped["reason"].startswith("budget: needs about 96 s, 95 s left")


def test_a_tiny_budget_records_skips_instead_of_overrunning(tmp_path):
    started = time.perf_counter()
    doc = check.run_check(tmp_path, "cpu", True, 1.0, check.SECTION_NAMES, None, ["test"], echo=lambda _: None)
    wall = time.perf_counter() - started
    steps = {f"{s}/{step}": e for s, body in doc["sections"].items() for step, e in body["steps"].items()}
    ran = {k for k, e in steps.items() if e["status"] != "skipped"}
    assert ran == {"environment/environment"}, ran  # the device's description: too cheap to budget
    budget = [k for k, e in steps.items() if e.get("reason", "").startswith("budget:")]
    assert {"bert/mha_eager", "decoder/standard", "correctness/reference", "pipeline/setup"} <= set(budget)
    assert len(steps) >= 20 and wall < 60, wall  # nothing was made: no bundle, no data stages


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory):
    """Section 4's tiny reference, made from a small corpus: (reference.json, {twin: tensors})."""
    from leanlm.benchmarks.gpucheck import reference
    from leanlm.data.tokenizer import save_tokenizer, train_wordpiece
    from leanlm.io import write_jsonl

    tmp = tmp_path_factory.mktemp("reference")
    words = "the old bridge crossed a river near our quiet town and every morning people walked over it".split()
    docs = [" ".join(words[(i + j) % len(words)] for j in range(60)) for i in range(40)]
    write_jsonl(tmp / "data" / "corpus" / "train.jsonl", [{"text": d} for d in docs])
    save_tokenizer(train_wordpiece(lambda: iter(docs), 120, True), tmp / "data" / "tokenizer", {"kind": "wordpiece"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LEANLM_CACHE", str(tmp / "cache"))
        (tmp / "ref").mkdir()
        reference.build_reference(tmp / "data", tmp / "ref", tiny=True)
    return reference.load_reference(tmp / "ref")


def test_the_twin_comparison_fails_a_twin_that_computes_something_else(tiny_reference, monkeypatch):
    from leanlm.benchmarks.gpucheck import correctness
    from leanlm.modeling import hf_twins

    record, tensors = tiny_reference
    cpu = torch.device("cpu")
    assert correctness.compare_twin("qwen", record, tensors["qwen"], cpu)["passed"]

    real = hf_twins.qwen2_twin

    def perturbed(model):
        twin = real(model)
        with torch.no_grad():
            for p in twin.parameters():
                p.mul_(1.1)
        return twin

    monkeypatch.setattr(hf_twins, "qwen2_twin", perturbed)
    result = correctness.compare_twin("qwen", record, tensors["qwen"], cpu)
    # Near initialisation the losses barely move (all about ln V): the logits tell the functions apart.
    assert not result["passed"] and not result["logits"]["ok"], result["logits"]


def test_the_twins_time_per_step_leaves_out_the_compile_and_the_warm_up(tiny_reference, monkeypatch):
    """``ms_per_step`` is the steady state, for leanlm and the twin alike: a slow step 0 (as torch.compile
    makes it) lands in ``first_step_s``, and the timed window opens on a synchronised device."""
    from leanlm.benchmarks import timing
    from leanlm.benchmarks.gpucheck import correctness, reference

    clock, synced = FakeClock(), []
    monkeypatch.setattr(timing, "clock", lambda: (clock.now, clock.now))
    monkeypatch.setattr(timing, "_synchronize", lambda device: synced.append(clock.now))
    batch_at = reference.TwinBatches.__call__

    def slow_first_step(self, step, micro):
        clock.now += 100.0 if step == 0 else 1.0  # step 0 as the compile makes it; then 1 s a step
        return batch_at(self, step, micro)

    monkeypatch.setattr(reference.TwinBatches, "__call__", slow_first_step)
    record, tensors = tiny_reference
    for name in ("bert", "qwen"):
        clock.now = 0.0
        synced.clear()
        result = correctness.compare_twin(name, record, tensors[name], torch.device("cpu"))
        warm = correctness.untimed_steps(result["steps"])
        assert 1 <= warm < result["steps"] and result["timed_steps"] == result["steps"] - warm
        assert result["ms_per_step"] == result["twin_ms_per_step"] == 1000.0, result
        assert result["first_step_s"] == result["twin_first_step_s"] == 100.0
        # The clock where step `warm` starts, in leanlm's run and in the twin's (which begins at its end):
        # the device was synchronised there, after the warm-up's work.
        opens, twin_begins = 100.0 + warm - 1, 100.0 + result["steps"] - 1
        assert {opens, twin_begins + opens} <= set(synced), synced


def test_the_largest_model_is_timed_after_a_warm_step(tmp_path, monkeypatch):
    """decoder/largest: its one timed step follows a warm-up step (a cold step pays cuDNN's plan building:
    2104 ms against 292 on the H200); the record keeps the cold step in ``first_step_s``."""
    from types import SimpleNamespace

    from leanlm.benchmarks.gpucheck import throughput

    calls = {}

    def bench(ctx, params, run_id, **settings):
        calls[run_id] = settings
        return {}

    monkeypatch.setattr(throughput, "_bench", bench)
    record = rec.CheckRecord(tmp_path, {}, 3600.0, {"decoder": 1.0}, echo=lambda _: None)
    throughput.section_decoder(record.section("decoder", "3"), SimpleNamespace(tiny=False, device=torch.device("cpu")))
    largest = record.doc["sections"]["decoder"]["largest_runs"]
    assert largest and all(calls[r]["warmup"] >= 1 and calls[r]["steps"] >= 1 for r in largest), calls


def test_largest_paper_micro_batch_is_the_1_7b_decoders_one_run_per_mixer():
    from leanlm.benchmarks.gpucheck.throughput import largest_runs

    assert largest_runs(str(REPO / "params" / "paper.yaml")) == [
        "ch4_1_7b-standard", "ch4_1_7b-non_approximate", "ch4_1_7b-rnd_emb_qk"]


def test_what_travels_and_the_device_calls():
    from leanlm.benchmarks.gpucheck.bundle import CALL_MARGIN_S, device_runs
    from leanlm.cli import build_parser

    carried = device.carried_distributions()
    assert {"jsonschema", "referencing", "rpds-py", "lm-eval", "datasets", "evaluate"} <= set(carried)
    assert not {"torch", "transformers", "tokenizers", "safetensors", "numpy", "snakemake", "dvc"} & set(carried)
    calls = device_runs()
    budgets, covered = [], []
    for call, sections in zip(calls, protocol.DEVICE_CALLS, strict=True):
        assert call["carry"] == [".gpu-bundle"] and call["timeout_s"] <= device.COMMAND_LIMIT_S
        install, _, rest = call["command"].partition("|| exit; ")
        assert f"--target {device.SITE} .gpu-bundle/wheels/*.whl" in install and f"PYTHONPATH={device.SITE}:" in install
        args = build_parser().parse_args(rest.split(" 2>&1")[0].split()[3:])  # after `python3 -m leanlm.cli`
        assert (args.command, args.device, args.bundle, args.out) == ("gpu-check", "cuda", ".gpu-bundle", "$OUT")
        assert check.parse_sections(args.sections) == sections and not args.tiny
        assert args.budget_s == check.budget_for(False, None, sections) == protocol.section_seconds(sections)
        assert call["timeout_s"] >= args.budget_s + CALL_MARGIN_S  # the check's budget, its start and the install
        budgets.append(args.budget_s)
        covered += sections
    assert sorted(covered) == sorted(check.SECTION_NAMES)  # every section, once
    # Both calls inside a session's device time, the machine's start and a margin with them.
    assert device.MACHINE_START_S + sum(budgets) + CALL_MARGIN_S <= device.SESSION_DEVICE_S
    # And at their timeouts: a call that runs to its timeout still leaves the next its whole time, with
    # the 30 s the machine waits idle for it (found in review: 48 + 510 + 360 s was over 900).
    calls = device_runs()
    assert device.MACHINE_START_S + sum(c["timeout_s"] for c in calls) + device.IDLE_RELEASE_S <= device.SESSION_DEVICE_S
    shown = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith('{"command"')]
    assert shown == [json.dumps(call) for call in calls], "docs/gpu-check.md must show the exact calls, in order"


def test_make_gpu_bundle_prints_every_device_call(tmp_path):
    from leanlm.benchmarks.gpucheck.bundle import DATA_FILE, device_runs, report

    (tmp_path / DATA_FILE).write_bytes(b"data")
    (tmp_path / "reference").mkdir()
    printed = report({"bytes": 4, "data": {"file": DATA_FILE}, "profile": "smoke", "wheels": {}, "commit": None},
                     tmp_path)
    calls = device_runs(str(tmp_path))
    assert len(calls) == len(protocol.DEVICE_CALLS) == 2
    for number, call in enumerate(calls, 1):
        assert f"call {number}:\n{json.dumps(call, indent=1)}" in printed


def test_a_bundle_whose_archive_changed_is_refused(tmp_path):
    from leanlm.benchmarks.gpucheck.bundle import BUNDLE_FILE, DATA_FILE, Bundle
    from leanlm.io import sha256_file, write_json

    (tmp_path / "part").write_text("x")
    with tarfile.open(tmp_path / DATA_FILE, "w:xz") as tar:
        tar.add(tmp_path / "part", arcname="corpus/part")
    write_json(tmp_path / BUNDLE_FILE, {"data": {"file": DATA_FILE, "sha256": sha256_file(tmp_path / DATA_FILE)}})
    Bundle.open(tmp_path).unpack_data(tmp_path / "unpacked")
    assert (tmp_path / "unpacked" / "corpus" / "part").read_text() == "x"
    (tmp_path / DATA_FILE).write_bytes(b"changed")
    with pytest.raises(ValueError, match="SHA-256 differs"):
        Bundle.open(tmp_path)
    with pytest.raises(FileNotFoundError, match="make gpu-bundle"):
        Bundle.open(tmp_path / "missing")


def test_sections_by_number_or_name_and_a_gpu_asked_for_where_there_is_none(capsys, monkeypatch):
    from leanlm.cli import main

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # --device cpu sets it: restored afterwards

    assert check.parse_sections("4, environment") == ("environment", "correctness")
    assert check.parse_sections(None) == check.SECTION_NAMES
    with pytest.raises(ValueError, match="'6' is not a section; use 1-5"):
        check.parse_sections("6")
    assert main(["gpu-check", "--device", "cpu", "--sections", "7", "--out", "unused"]) == 2
    assert "'7' is not a section" in capsys.readouterr().err
    if not torch.cuda.is_available():  # CI: no GPU, so --device cuda stops at once with a message
        assert main(["gpu-check", "--device", "cuda", "--out", "unused"]) == 2
        assert "sees no CUDA device here; use --device cpu" in capsys.readouterr().err
