"""How the module that trains runs on its device: torch.compile or eager, and the fp32 matmul precision.

``TrainConfig.compile`` is ``"auto"`` (the default), ``True`` or ``False``. ``"auto"`` compiles on CUDA,
where eager mode's elementwise traffic (norms, RoPE, casts, MHE's head-embedding broadcast) costs more
than the GEMMs, for runs long enough to repay the compile (:data:`AUTO_MIN_STEPS`), and stays eager
elsewhere: on a CPU inductor needs a C++ compiler and minutes of a 2-core machine per model, so CPU runs
and tests compute exactly what they did before.

torch.compile compiles lazily, at the first call. The engine therefore probes it before the first
step (:func:`compiled_or_eager`): one forward and backward of the first micro-batch through the
compiled module, with the RNG streams forked and the gradients discarded. If compilation fails there
(no C++ compiler or Triton, an operator inductor cannot lower, a compiler bug), the run trains the eager
module instead, logs why at WARNING, and says so in its summary (``compiled``, ``compile_fallback``):
never a failed job for a speed option. A failure of the model itself is no compilation failure, but
it also reaches the eager module, which then raises it with its own traceback. The probe compiles the
shapes of the first batch, so the first step reuses that compilation rather than paying twice.

Shapes that change from batch to batch (:func:`mark_varying`): dynamo compiles a graph for the sizes it
is first called with and, when a size changes, compiles again with that dimension symbolic ("automatic
dynamic"), once per newly changing dimension. MLM's count of masked positions changes every batch, and
fine-tuning pads every batch to its own longest example, so those runs compiled twice, the second time
inside the timed steps (BERT-base: tens of seconds with inductor; the first GPU check, D3 and D4). The
batch builder knows which dimensions vary and says so (``varying_dims``); the engine marks exactly those
dynamic before every compiled call, so the first compilation is already the symbolic one and the run
compiles once. The fixed dimensions (the batch size, the packed length) stay static, so inductor keeps
specialising its kernels on them, which ``torch.compile(dynamic=True)`` (every size symbolic) would give up.
Evaluation runs the plain module, never the compiled one: its batch sizes and eval mode compile nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from leanlm.errors import TrainingError

log = logging.getLogger(__name__)

COMPILE_CHOICES = ("auto", True, False)
# torch.compile's backend (the tests replace it with one that fails, to exercise the fallback).
BACKEND: Any = "inductor"


def valid_compile(value: Any) -> bool:
    """Whether ``value`` is a compile setting: "auto", true or false (not 1, "yes" or None)."""
    return value == "auto" or isinstance(value, bool)


# "auto" compiles a run of at least this many optimizer steps. On the H200 (docs/results/gpu/2026-11-28-h200)
# compiling BERT-base's MLM step took 58 s and saved 27 ms a step (140.6 -> 113.4 ms at 128 x 512): it
# repays itself after about 2,100 steps. A GLUE fine-tuning of a few hundred steps (RTE, MRPC, CoLA at the
# paper's batch) would spend more on the compile than it saves; pretraining and MNLI-sized fine-tunings
# (tens of thousands of steps) compile. ``compile: true`` compiles a run of any length.
AUTO_MIN_STEPS = 2000


def compile_wanted(setting: Any, device: torch.device, total_steps: int | None = None) -> bool:
    """Whether a run with compile ``setting`` compiles on ``device`` ("auto": on CUDA only, and only for a
    run of at least :data:`AUTO_MIN_STEPS` optimizer steps when ``total_steps`` is known)."""
    if setting != "auto":
        return bool(setting)
    return device.type == "cuda" and (total_steps is None or total_steps >= AUTO_MIN_STEPS)


def compiled_or_eager(module: nn.Module, probe: Callable[[nn.Module], None], desc: str
                      ) -> tuple[nn.Module, str | None]:
    """``(torch.compile(module), None)`` if ``probe`` (one training forward and backward, leaving no
    trace: see the module docstring) runs through it, else ``(module, why it failed)``."""
    # What a failed compilation raises: dynamo's errors, inductor's wrapped as BackendCompilerFailed
    # (imported here: torch._dynamo takes a second to import, which commands that never train skip).
    from torch._dynamo.exc import TorchDynamoException

    compiled = torch.compile(module, backend=BACKEND)
    log.info("%s: compiling the model with torch.compile (the first step waits for it)", desc)
    try:
        probe(compiled)
    except TorchDynamoException as exc:
        reason = _first_line(exc)
        log.warning("%s: torch.compile failed, training eagerly instead (%s). Set compile: false in the "
                    "profile to skip the attempt.", desc, reason)
        return module, reason
    return compiled, None


def mark_varying(batch: Mapping[str, Any], dims: Mapping[str, Iterable[int]], where: str) -> None:
    """Mark ``dims`` (input name -> dimensions) of ``batch``'s tensors dynamic for torch.compile: the
    dimensions the batch builder ``where`` says differ from batch to batch (see the module docstring).

    ``maybe_mark_dynamic``, not ``mark_dynamic``: where a model's code does pin a marked size (a size of
    1, a branch on the length), dynamo specialises on it as it would unmarked, instead of failing the
    compilation (which would send the run to the eager fallback); tests/test_recompiles.py checks that
    the training models pin none. Marking costs an attribute on the tensor and changes no result.
    """
    import torch._dynamo  # only when compiling (a second to import, see compiled_or_eager)

    for name, dimensions in dims.items():
        tensor = batch.get(name)
        if not isinstance(tensor, torch.Tensor):
            raise TrainingError(f"{where}.varying_dims names input {name!r}, which its batch "
                                f"{'lacks' if tensor is None else 'holds as no tensor'} (inputs: "
                                f"{', '.join(sorted(batch))}); make the declaration match the batch")
        for dim in dimensions:
            if not -tensor.dim() <= dim < tensor.dim():
                raise TrainingError(f"{where}.varying_dims marks dimension {dim} of input {name!r}, which has "
                                    f"shape {tuple(tensor.shape)}; make the declaration match the batch")
            torch._dynamo.maybe_mark_dynamic(tensor, dim % tensor.dim())


def graphs_compiled() -> int:
    """How many graphs dynamo has compiled in this process so far (its ``unique_graphs`` counter): the
    difference across a run is the run's compilations, recompilations included."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def set_matmul_precision(device: torch.device, precision: str) -> str:
    """Let float32 matmuls use TF32 tensor cores on CUDA when the run trains in fp32; returns what was
    chosen, for the log.

    ``torch.set_float32_matmul_precision("high")`` (which affects CUDA only, and which inductor reads
    for its own kernels): TF32 keeps fp32's range with a 10-bit mantissa, the precision NVIDIA's and
    PyTorch's defaults for training give convolutions. A bf16 run computes its matmuls in bf16 under
    autocast; the few it keeps in float32 do so for accuracy (the appendix Approximate's normalisers,
    mixers/linear.py), so TF32 is left off there, as it is on a CPU.
    """
    if device.type != "cuda":
        return "CPU: float32 matmuls in float32"
    # Set for every run, either way: the setting is the process's, and an earlier run in the same
    # process (a benchmark's, a test's) must not decide this one's.
    if precision == "fp32":
        torch.set_float32_matmul_precision("high")
        return "CUDA, fp32 run: float32 matmuls in TF32 (torch.set_float32_matmul_precision('high'))"
    torch.set_float32_matmul_precision("highest")
    return (f"CUDA, {precision} run: matmuls in bf16 under autocast; the float32 ones it keeps stay IEEE "
            f"float32 (torch.set_float32_matmul_precision('highest'))")


def _first_line(exc: BaseException) -> str:
    """``Type: message`` of the error that made compilation fail, first line only (dynamo appends pages
    of advice), from the innermost cause dynamo wrapped."""
    inner = exc
    while True:  # BackendCompilerFailed keeps the backend's error as inner_exception, others as the cause
        nested = getattr(inner, "inner_exception", None) or inner.__cause__
        if nested is None or nested is inner:
            break
        inner = nested
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[0] if text else ''}".strip()
