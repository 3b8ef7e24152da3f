"""Where a training step's time goes: the top operators of a few profiled steps, grouped by kind.

The first GPU check (docs/results/gpu/2026-11-28-h200) measured BERT-base at 34.6% MFU compiled and
ch. 4's Approximate mixer at a fifth of Standard's speed, and could not say why: a step time does not
tell a GEMM-bound step from one lost in elementwise kernels or waiting on the host. So ``leanlm bench
--profile-steps N`` (and the GPU check's throughput sub-steps) run N more steps under
``torch.profiler`` after the timed ones and record:

- ``top``: the operators with the most self time on the device (CUDA kernels; on a CPU, ATen
  operators' self CPU time), each with its calls, milliseconds per step and share of the total;
- ``by_kind``: the same time summed over kinds matched on the name (:data:`KINDS`: matmul, attention,
  normalisation, softmax, optimizer, copy and cast, elementwise, other), the first question to ask of
  a step below its roofline;
- ``busy_ms_per_step`` against ``wall_ms_per_step``: on CUDA, the kernels' summed time over the wall
  time; a wide gap is a device waiting on the host (launches, syncs, the input pipeline).

The profiled steps are not the timed ones: the profiler's overhead stays out of the throughput figures.
Kernel names are the library's (cuBLAS/CUTLASS "gemm", cuDNN "fmha", Triton "triton_" from
``torch.compile``): the kinds are a reading aid, and ``top`` keeps the names themselves.
"""

from __future__ import annotations

import re
from typing import Any

# (kind, pattern on the lower-cased operator or kernel name); the first match wins, so the specific
# kinds come before "elementwise".
KINDS: tuple[tuple[str, str], ...] = (
    ("attention", r"fmha|flash|attention|sdpa|cudnn_generated|efficient_attention"),
    ("matmul", r"gemm|matmul|aten::mm|aten::bmm|aten::addmm|aten::baddbmm|nvjet|cutlass|sm90_xmma|aten::linear"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("normalisation", r"norm"),
    ("softmax", r"softmax|log_softmax|cross_entropy|nll_loss"),
    ("copy and cast", r"copy|cast|to_copy|convert|contiguous|cat|index|gather|scatter|memcpy|memset|fill"),
    ("elementwise", r"elementwise|vectorized|reduce|triton_|mul|add|div|exp|pow|silu|gelu|relu|where|sum|mean"),
)
TOP_N = 25


def kind_of(name: str) -> str:
    """The kind of an operator or kernel name (:data:`KINDS`), ``other`` if none matches."""
    lowered = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other"


def summarise(events, steps: int, wall_s: float, device_type: str) -> dict[str, Any]:
    """The record (module docstring) of ``steps`` profiled steps that took ``wall_s`` seconds, from the
    profiler's ``key_averages()`` events."""
    from torch.autograd import DeviceType

    on_device = device_type == "cuda"
    side = DeviceType.CUDA if on_device else DeviceType.CPU
    timed = []
    for event in events:
        # On CUDA only the kernels count: Kineto also attaches each kernel's time to the CPU operator that
        # launched it, so counting operators too would count every kernel twice. On a CPU the operators'
        # self CPU time (a parent's excludes its children's). Neither counts user annotations (ranges such
        # as the optimizer's step or a profiler step, which span operators counted already).
        if event.device_type != side or event.is_user_annotation:
            continue
        micros = event.self_device_time_total if on_device else event.self_cpu_time_total
        if micros > 0:
            timed.append((event.key, int(event.count), micros / 1000.0))
    total_ms = sum(ms for _, _, ms in timed)
    by_kind: dict[str, float] = {}
    for name, _, ms in timed:
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + ms
    top = sorted(timed, key=lambda item: -item[2])[:TOP_N]
    return {
        "steps": steps,
        "clock": "self device (kernel) time" if on_device else "self CPU time of ATen operators",
        "wall_ms_per_step": 1000.0 * wall_s / steps,
        "busy_ms_per_step": total_ms / steps,
        "busy_fraction": (total_ms / 1000.0) / wall_s if wall_s > 0 else None,
        "by_kind": {kind: {"ms_per_step": ms / steps, "share": ms / total_ms if total_ms else 0.0}
                    for kind, ms in sorted(by_kind.items(), key=lambda item: -item[1])},
        "top": [{"name": name[:160], "kind": kind_of(name), "calls_per_step": count / steps,
                 "ms_per_step": ms / steps, "share": ms / total_ms if total_ms else 0.0}
                for name, count, ms in top],
    }
