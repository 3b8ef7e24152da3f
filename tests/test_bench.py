"""``leanlm bench``: the report's fields (batch build and step time apart, tokens/s, peak memory, MFU
against the peak of the precision used), the named configurations (the paper's BERT-base and ch. 4's
500M decoders) and the FLOP accounting shared with ``leanlm budget``. Timings are measured, never
asserted (docs/benchmarks.md)."""

import json

import pytest
import torch

from leanlm import budget
from leanlm.benchmarks.pretraining import (BENCH_CONFIGS, PEAK_BF16_FLOPS, matmul_precision, peak_flops,
                                           training_flops_per_token)
from leanlm.cli import main
from leanlm.config import load_config
from leanlm.runs import get_run, pretrain_settings

FIELDS = ("batch_ms", "step_ms", "loop_ms", "batch_cpu_ms", "step_cpu_ms", "loop_cpu_ms", "tokens_per_s", "step_tokens_per_s", "peak_memory_bytes",
          "peak_memory_kind", "flops_per_token", "mfu", "step_mfu", "peak_flops", "matmul_precision", "losses",
          "compiled", "compile_fallback")


def test_peak_is_the_one_of_the_precision_used():
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "fp32") == 67e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "tf32") == 494e12
    assert peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12 and peak_flops("NVIDIA H200", "fp32") == 67e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "tf32") == 156e12
    assert peak_flops("NVIDIA L40S") == 362e12 and peak_flops("Tesla T4") is None
    assert dict(PEAK_BF16_FLOPS)["H100"] == 989e12  # what `leanlm budget --gpu` reads
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert matmul_precision(cuda, "fp32") == "fp32" and matmul_precision(cuda, "bf16") == "bf16"
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls then run as TF32: that peak applies
        assert matmul_precision(cuda, "fp32") == "tf32" and matmul_precision(cpu, "fp32") == "fp32"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed


def test_named_configurations_are_the_paper_runs():
    paper = load_config("params/paper.yaml")
    for name, spec in BENCH_CONFIGS.items():
        run = get_run(paper, spec["run"])
        assert spec["seq_len"] <= run.model["max_position"], name
    standard = get_run(paper, BENCH_CONFIGS["ch4_standard_500m"]["run"])
    approximate = get_run(paper, BENCH_CONFIGS["ch4_approximate_500m"]["run"])
    assert standard.size == approximate.size == "qwen_500m"
    assert (standard.model["attention"], approximate.model["attention"]) == ("standard", "approximate")
    assert pretrain_settings(paper, standard)["seq_len"] == BENCH_CONFIGS["ch4_standard_500m"]["seq_len"] == 2048
    assert BENCH_CONFIGS["bert_base_mhe_mul"]["batch_size"] == 32 and BENCH_CONFIGS["bert_base_mha"]["seq_len"] == 512


def test_bench_flops_are_the_budgets():
    paper = load_config("params/paper.yaml")
    for run_id in ("ch4_uniform-standard", "ch4_uniform-approximate", "ch3_encoder-mhe_mul"):
        run = get_run(paper, run_id)
        settings = pretrain_settings(paper, run)
        planned = budget.pretrain_budget(paper, run)
        model, model_config = budget._meta_model(paper, run, settings)
        assert training_flops_per_token(model, model_config, run.objective, settings["seq_len"],
                                        settings.get("mask_prob", 0.15)) == planned.flops_per_token, run_id


@pytest.mark.parametrize("args, objective, attention", [
    (["--run", "ch4_uniform-standard", "--params", "params/smoke.yaml"], "causal_lm", "standard"),
    (["--run", "ch4_uniform-approximate", "--params", "params/smoke.yaml"], "causal_lm", "approximate"),
    (["--size", "tiny", "--attention", "mhe_mul", "--prefetch", "0"], "mlm", "mhe_mul"),
    # FixedSeqQK needs its fixed text before a forward pass: random ids here, as the rows are
    (["--run", "ch4_uniform-fixed_seq_qk", "--params", "params/smoke.yaml"], "causal_lm", "fixed_seq_qk"),
])
def test_bench_command_reports_its_fields_on_cpu(tmp_path, capsys, args, objective, attention):
    out = tmp_path / "bench.json"
    assert main(["bench", *args, "--batch-size", "2", "--seq-len", "16", "--steps", "2", "--warmup", "1",
                 "--device", "cpu", "--out", str(out)]) in (0, None)
    result = json.loads(out.read_text())
    assert all(field in result for field in FIELDS)
    assert (result["objective"], result["attention"], result["device"]) == (objective, attention, "cpu")
    assert result["mfu"] is None and result["peak_flops"] is None  # no peak is known for a CPU
    assert result["compiled"] is False and result["compile_fallback"] is None  # eager unless --compile
    assert result["peak_memory_kind"] == "process peak RSS" and result["peak_memory_bytes"] > 0
    assert result["batch_ms"] > 0 and result["step_ms"] > 0 and result["loop_ms"] > 0
    assert len(result["losses"]) == 3 and all(v == v for v in result["losses"])  # 1 warm-up + 2 timed, no NaN
    printed = capsys.readouterr().out
    assert "batch build" in printed and "tokens/s" in printed and "peak memory" in printed and "MFU n/a" in printed


def test_bench_refuses_what_it_cannot_measure(capsys):
    for args, message in ((["--config", "bert_large"], "unknown; one of bert_base_mha"),
                          (["--params", "params/smoke.yaml"], "--params names the profile of --run"),
                          (["--run", "ch4_uniform-standard", "--params", "params/smoke.yaml", "--seq-len", "4096"],
                           "seq_len=4096 exceeds")):
        assert main(["bench", *args, "--device", "cpu"]) == 2
        assert message in capsys.readouterr().err


def test_build_only_times_the_batches_of_a_paper_size_run_without_a_model(tmp_path):
    out = tmp_path / "build.json"
    assert main(["bench", "--config", "ch4_standard_500m", "--batch-size", "2", "--steps", "1", "--warmup", "0",
                 "--build-only", "--device", "cpu", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["build_only"] and result["batch_ms"] > 0 and "step_ms" not in result
    assert (result["seq_len"], result["objective"], result["run"]) == (2048, "causal_lm", "ch4_uniform-standard")


def test_the_gpu_commands_in_docs_are_valid_bench_commands():
    """docs/benchmarks.md's commands for a GPU, as written there: each parses with `leanlm bench`'s own
    parser and names a configuration that exists (they need a GPU to run at these sizes; the CPU tests
    above run the same code at tiny sizes)."""
    import shlex
    from pathlib import Path

    from leanlm.cli import build_parser

    docs = (Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    commands = [line.strip() for line in docs.splitlines() if line.strip().startswith("leanlm bench ")]
    configs, parity, speed = set(), set(), []
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        if args.parity is not None:  # the CPU comparison with transformers (tests/test_bench_parity.py)
            parity.add(args.parity)
            continue
        if args.speed:  # ch. 2's pretraining speed of a profile (tests/test_objective_speed.py)
            speed.append(args.params)
            continue
        assert args.config in BENCH_CONFIGS, command
        configs.add(args.config)
    assert configs == set(BENCH_CONFIGS)  # every named configuration has its command there
    assert parity  # and the parity table its command
    assert "params/paper.yaml" in speed  # and the paper's pretraining speed its command


def test_loop_only_builds_one_model_and_times_the_first_step_apart(monkeypatch):
    """The GPU check's large models: the loop alone (no step-on-prebuilt-batches phase, whose model would be
    built and compiled a second time), with step 0's wall time (the compile, when compiled) reported apart."""
    import leanlm.benchmarks.pretraining as bench

    built, real = [], bench.build_model
    monkeypatch.setattr(bench, "build_model", lambda *a, **k: built.append(a) or real(*a, **k))
    result = bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=2, warmup=1, device="cpu", loop_only=True)
    assert len(built) == 1
    assert result["step_ms"] is None and result["step_mfu"] is None and result["step_tokens_per_s"] is None
    assert result["loop_ms"] > 0 and result["first_step_s"] > 0 and len(result["losses"]) == 3
