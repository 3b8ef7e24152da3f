"""``leanlm bench --profile-steps``: the kernel profile of extra steps after the timed ones
(leanlm.benchmarks.kernel_profile). Timings are read, never asserted; what is asserted is where the
profile comes from and that it adds up."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from leanlm.benchmarks import kernel_profile
from leanlm.benchmarks import pretraining as bench
from leanlm.cli import main


@pytest.mark.parametrize("name, kind", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_NNT", "matmul"),
    ("aten::addmm", "matmul"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("aten::native_layer_norm", "normalisation"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "elementwise"),
    ("triton_per_fused_add_native_layer_norm_0", "normalisation"),
    ("aten::_log_softmax", "softmax"),
    ("Memcpy HtoD (Pinned -> Device)", "copy and cast"),
    ("something_unheard_of", "other"),
])
def test_kinds_are_read_from_real_names(name, kind):
    assert kernel_profile.kind_of(name) == kind


def _event(key, count, self_cpu, self_device, device="cpu", annotation=False):
    """A ``key_averages()`` entry as torch's profiler makes them: on CUDA, Kineto attaches each kernel's
    time to the CPU operator that launched it too (``aten::mm`` carries its GEMM's self device time), and
    user annotations (``record_function`` ranges, the optimizer's step) appear on both sides."""
    from torch.autograd import DeviceType

    return SimpleNamespace(key=key, count=count, self_cpu_time_total=self_cpu, self_device_time_total=self_device,
                           device_type=DeviceType.CUDA if device == "cuda" else DeviceType.CPU,
                           is_user_annotation=annotation)


EVENTS = [
    _event("aten::mm", 4, 900.0, 3000.0),                                   # the launching op: its kernel's time
    _event("sm90_xmma_gemm_x", 4, 0.0, 3000.0, device="cuda"),              # the kernel itself
    _event("vectorized_elementwise_kernel<mul>", 8, 0.0, 1000.0, device="cuda"),
    _event("aten::mul", 8, 60.0, 1000.0),
    _event("Optimizer.step#AdamW.step", 2, 500.0, 0.0, annotation=True),    # host-side range
    _event("ProfilerStep#1", 2, 0.0, 4000.0, device="cuda", annotation=True),  # its device-side span
    _event("aten::empty", 2, 0.0, 0.0),
]


def test_summary_counts_each_kernel_once_on_cuda():
    cuda = kernel_profile.summarise(EVENTS, steps=2, wall_s=0.004, device_type="cuda")
    assert [op["name"] for op in cuda["top"]] == ["sm90_xmma_gemm_x", "vectorized_elementwise_kernel<mul>"]
    assert cuda["busy_ms_per_step"] == pytest.approx(2.0) and cuda["wall_ms_per_step"] == pytest.approx(2.0)
    assert cuda["busy_fraction"] == pytest.approx(1.0)
    assert cuda["by_kind"]["matmul"] == {"ms_per_step": pytest.approx(1.5), "share": pytest.approx(0.75)}
    assert cuda["top"][1]["calls_per_step"] == 4


def test_summary_reads_operators_cpu_time_on_a_cpu():
    cpu = kernel_profile.summarise(EVENTS, steps=1, wall_s=0.002, device_type="cpu")
    assert [op["name"] for op in cpu["top"]] == ["aten::mm", "aten::mul"]  # no annotation, no kernel
    assert cpu["top"][0]["ms_per_step"] == pytest.approx(0.9) and cpu["busy_ms_per_step"] == pytest.approx(0.96)
    assert sum(v["share"] for v in cpu["by_kind"].values()) == pytest.approx(1.0)


def test_profiled_steps_leave_the_timed_ones_alone(monkeypatch):
    """Same seed, with and without a profile: the timed steps see the same batches, the profile covers
    exactly the extra steps, and only one model is built. (The linear schedule spans the extra steps, so
    from the second update on the learning rate differs a little: the first two losses, before it, are
    equal to the bit.)"""
    plain = bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=2, warmup=1, device="cpu", loop_only=True)
    built, real = [], bench.build_model
    monkeypatch.setattr(bench, "build_model", lambda *a, **k: built.append(a) or real(*a, **k))
    profiled = bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=2, warmup=1, device="cpu",
                               loop_only=True, profile_steps=2)
    assert len(built) == 1
    assert profiled["losses"][:2] == plain["losses"][:2] and len(profiled["losses"]) == 3
    assert plain["kernel_profile"] is None
    record = profiled["kernel_profile"]
    assert record["steps"] == 2 and record["clock"] == "self CPU time of ATen operators"
    # A tiny BERT's step on a CPU: its linear layers are matmuls, and they are there.
    assert record["by_kind"]["matmul"]["ms_per_step"] > 0
    assert 0 < record["busy_ms_per_step"] and record["top"][0]["share"] <= 1.0


def test_bench_command_prints_and_writes_the_profile(tmp_path, capsys):
    out = tmp_path / "bench.json"
    main(["bench", "--size", "tiny", "--batch-size", "2", "--seq-len", "16", "--steps", "1", "--warmup", "1",
          "--device", "cpu", "--profile-steps", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "profile of 1 more step(s)" in printed and "by kind:" in printed
    assert json.loads(out.read_text())["kernel_profile"]["steps"] == 1


def test_a_negative_profile_is_refused():
    from leanlm.errors import ConfigError

    with pytest.raises(ConfigError, match="profile_steps=-1"):
        bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=1, device="cpu", profile_steps=-1)


def test_the_profilers_start_up_is_in_no_window(monkeypatch):
    """CUPTI's start-up can take a second on CUDA: neither the timed steps nor the profiled steps' wall
    time may hold it (a profiler whose start takes 0.5 s here)."""
    import time

    import torch.profiler

    real = torch.profiler.profile

    class SlowStart(real):
        def start(self):
            time.sleep(0.5)
            return super().start()

    monkeypatch.setattr(torch.profiler, "profile", SlowStart)
    result = bench.run_bench(size="tiny", batch_size=2, seq_len=16, steps=2, warmup=1, device="cpu", loop_only=True,
                             profile_steps=1)
    assert result["kernel_profile"]["wall_ms_per_step"] < 400
    assert result["loop_ms"] < 400
