"""Section 1: the environment, the measured matmul rate, and which SDPA kernel each attention variant gets.

SDPA kernels. ``F.scaled_dot_product_attention`` picks one of several implementations per call (flash,
memory-efficient, cuDNN, or the unfused math path), by dtype, head size, mask and layout; a variant that
silently falls to the math path builds the full score matrix and loses much of its speed and memory.
Each case builds a one-layer model of the variant, runs a forward and backward pass under the training
autocast, and records the ATen SDPA operators the profiler saw (which kernel ran), then tries each
backend alone (``torch.nn.attention.sdpa_kernel``) and records whether it accepts the case and, if not,
the first line of PyTorch's reason. Mixers without softmax attention (FNet, Linear, MLP, Approximate,
Non-approximate) run no SDPA operator: ``kernel`` is ``none``.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import time
import warnings
from typing import Any

import torch

from leanlm.benchmarks.pretraining import PEAK_FLOPS, peak_flops
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model

# ATen operator name fragments -> the kernel they are (CPU's fused kernel is named flash too).
_KERNELS = (("cudnn", "cudnn"), ("flash_attention_for_cpu", "flash (cpu)"), ("flash", "flash"),
            ("efficient", "memory-efficient"), ("math", "math"), ("overrideable", "overrideable"))


def _driver_version() -> str | None:
    """The NVIDIA driver version (nvidia-smi, else NVML through nvidia-ml-py), or None."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML, no driver: say None
        return None


def environment(device: torch.device) -> dict[str, Any]:
    """Versions, the device and the bf16 peak MFU divides by (None on CPU: no peak is known)."""
    import transformers

    fields: dict[str, Any] = {
        "python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__,
        "torch_cuda": torch.version.cuda, "transformers": transformers.__version__,
        "cpu_threads": torch.get_num_threads(), "device_type": device.type,
    }
    if device.type != "cuda":
        return {**fields, "device_name": "cpu", "peak_bf16_flops": None,
                "peak_note": "no MFU on a CPU: no peak is known for it"}
    props = torch.cuda.get_device_properties(device)
    name = torch.cuda.get_device_name(device)
    matched = next((key for key, _ in PEAK_FLOPS if key.lower() in name.lower()), None)
    return {
        **fields,
        "device_name": name,
        "device_count": torch.cuda.device_count(),
        "capability": list(torch.cuda.get_device_capability(device)),
        "multiprocessors": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "driver": _driver_version(),
        "cudnn": torch.backends.cudnn.version(),
        "bf16_supported": torch.cuda.is_bf16_supported(),
        "tf32_matmul_allowed": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "sdpa_enabled": {"flash": torch.backends.cuda.flash_sdp_enabled(),
                         "memory-efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                         "math": torch.backends.cuda.math_sdp_enabled(),
                         "cudnn": torch.backends.cuda.cudnn_sdp_enabled()},
        "peak_table_entry": matched,
        "peak_bf16_flops": peak_flops(name, "bf16"),
        "peak_note": "dense bf16 tensor-core peak of the data sheet (leanlm.benchmarks.pretraining.PEAK_FLOPS)"
                     if matched else "device not in PEAK_FLOPS: no MFU is computed",
    }


def matmul_rate(device: torch.device, n: int, repeats: int = 10) -> dict[str, Any]:
    """bf16 n x n x n matrix products on random data: the median TFLOP/s of ``repeats`` timed products
    after three untimed ones (the ceiling the MFU's data-sheet peak is read beside)."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    times = []
    for i in range(3 + repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
        else:
            begin = time.perf_counter()
            a @ b
            seconds = time.perf_counter() - begin
        if i >= 3:
            times.append(seconds)
    times.sort()
    median = times[len(times) // 2]
    return {"n": n, "repeats": repeats, "median_s": median, "tflops": 2.0 * n ** 3 / median / 1e12}


def _kernel(ops: set[str]) -> str:
    for fragment, kernel in _KERNELS:
        if any(fragment in op for op in ops):
            return kernel
    return "none"


def _sdpa_ops(events) -> set[str]:
    return {e.name for e in events if "scaled_dot_product" in e.name and e.name != "aten::scaled_dot_product_attention"}


def _case_model(backbone: str, attention: str, sizes: dict[str, int], kv_heads: int = 0):
    if backbone == "qwen":
        config = ModelConfig(backbone="qwen", type_vocab_size=0, attention=attention, n_kv_heads=kv_heads,
                             dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-6, **sizes)
        model = build_model(config, "causal_lm")
        if attention == "fixed_seq_qk":
            model.set_fixed_sequence(torch.arange(config.max_position) % config.vocab_size)
        return model
    config = ModelConfig(backbone=backbone, attention=attention, dropout=0.0, attention_dropout=0.0,
                         type_vocab_size=2 if backbone == "bert" else 0, n_kv_heads=kv_heads, **sizes)
    return build_model(config, "mlm" if backbone == "bert" else "causal_lm")


def _step(model, ids, mask, device: torch.device) -> None:
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask)
    out["logits"].float().square().mean().backward()


def sdpa_cases(tiny: bool) -> list[dict[str, Any]]:
    """The cases probed: ch. 3's variants in BERT (packed rows: no mask; fine-tuning: a padding mask) and
    in the GPT-2 decoder (causal), and ch. 4's mixers in the Qwen decoder, plus Standard with GQA, at the
    paper's head size (64) and a paper sequence length (tiny: small sizes, the same cases)."""
    from leanlm.modeling.attention import ATTENTION
    from leanlm.modeling.mixers import MIXERS

    if tiny:
        enc = dict(vocab_size=128, n_layers=1, d_model=32, n_heads=2, head_dim=16, d_ff=64, max_position=32)
        dec, length = dict(enc), 32
    else:
        enc = dict(vocab_size=1024, n_layers=1, d_model=768, n_heads=12, head_dim=64, d_ff=3072, max_position=512)
        dec, length = dict(vocab_size=1024, n_layers=1, d_model=896, n_heads=14, head_dim=64, d_ff=4864,
                           max_position=2048), 2048
    cases = []
    for name in ATTENTION.names():
        # a variant's own options (leanlm.modeling.variants): GQA groups the heads in pairs
        kv = {"kv_heads": enc["n_heads"] // 2} if "n_kv_heads" in ATTENTION.get(name).options else {}
        cases.append({"case": f"bert/{name}", "backbone": "bert", "attention": name, "sizes": enc,
                      "length": enc["max_position"], "padding": False, **kv})
        cases.append({"case": f"bert/{name}/padding_mask", "backbone": "bert", "attention": name, "sizes": enc,
                      "length": enc["max_position"], "padding": True, **kv})
        cases.append({"case": f"gpt2/{name}", "backbone": "gpt2", "attention": name, "sizes": enc,
                      "length": enc["max_position"], "padding": False, **kv})
    for name in MIXERS.names():
        cases.append({"case": f"qwen/{name}", "backbone": "qwen", "attention": name, "sizes": dec,
                      "length": length, "padding": False})
    cases.append({"case": "qwen/standard/gqa", "backbone": "qwen", "attention": "standard", "sizes": dec,
                  "length": length, "padding": False, "kv_heads": 2})
    return cases


def sdpa_kernel_of(case: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """One case: the SDPA operators a forward + backward ran, and each backend's verdict alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = _case_model(case["backbone"], case["attention"], case["sizes"], case.get("kv_heads", 0)).to(device)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, case["sizes"]["vocab_size"], (2, case["length"]), generator=gen).to(device)
    mask = None
    if case["padding"]:  # the second row ends in padding, as a fine-tuning batch does
        mask = torch.ones_like(ids)
        mask[1, case["length"] // 2:] = 0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _step(model, ids, mask, device)
    ops = _sdpa_ops(prof.events())
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "memory-efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    eligible: dict[str, Any] = {}
    if ops:
        for label, backend in backends.items():
            # PyTorch says why a kernel cannot take a case in warnings; the error itself only says none could.
            with warnings.catch_warnings(record=True) as why:
                warnings.simplefilter("always")
                try:
                    with sdpa_kernel(backend):
                        _step(model, ids, mask, device)
                    eligible[label] = True
                except RuntimeError as exc:
                    reasons = _reasons(why) or [str(exc).strip().splitlines()[0]]
                    eligible[label] = "; ".join(r[:300] for r in reasons)
    return {"kernel": _kernel(ops), "ops": sorted(ops), "eligible": eligible, "length": case["length"],
            "padding_mask": case["padding"]}


def _reasons(caught) -> list[str]:
    """The distinct SDPA warnings of a block (why a fused kernel was not used), first line each."""
    seen: dict[str, None] = {}
    for warning in caught:
        text = str(warning.message).strip().splitlines()[0] if str(warning.message).strip() else ""
        if text and not text.endswith(":") and ("attention" in text.lower() or "kernel" in text.lower()):
            seen.setdefault(text.split(" (Triggered internally")[0])
    return list(seen)[:4]


def sdpa_kernels(device: torch.device, tiny: bool) -> dict[str, Any]:
    """Every case of :func:`sdpa_cases`; a case that fails is recorded with its error, the others go on."""
    from leanlm.errors import ConfigError

    results: dict[str, Any] = {}
    for case in sdpa_cases(tiny):
        try:  # SDPA's warnings (why a kernel refused a case) are kept in the case's "eligible"
            results[case["case"]] = sdpa_kernel_of(case, device)
        except ConfigError as exc:  # a combination the models refuse (FNet has no causal form)
            results[case["case"]] = {"kernel": "not applicable", "reason": str(exc)[:300]}
        except Exception as exc:  # noqa: BLE001 - one variant's failure must not hide the others'
            results[case["case"]] = {"kernel": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    summary: dict[str, list[str]] = {}
    for case, result in results.items():
        summary.setdefault(result["kernel"], []).append(case)
    return {"cases": results, "by_kernel": summary}


def section_environment(section, ctx) -> None:
    """Section 1 (module docstring): the description always; the matmul and the SDPA cases as time allows."""
    section.run("environment", lambda: environment(ctx.device), 0.0)
    section.run("matmul", lambda: matmul_rate(ctx.device, 256 if ctx.tiny else 8192), 1.0 if ctx.tiny else 5.0)
    # 30.6 s on the H200 (docs/results/gpu/2026-11-28-h200): 39 profiled forward and backward passes.
    section.run("sdpa_kernels", lambda: sdpa_kernels(ctx.device, ctx.tiny), 2.0 if ctx.tiny else 30.0)
