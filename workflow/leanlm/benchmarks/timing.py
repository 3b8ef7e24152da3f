"""The clocks of a timed training run (``leanlm bench``, the GPU check): :func:`timed_fit` and the batch sources
it times over.

Split from :mod:`leanlm.benchmarks.pretraining` (which builds the models and batches and reports): what is
measured, where each window opens and closes, and the profiled steps after the timed ones.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from leanlm.training.engine import TrainConfig, Trainer


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Prebuilt:
    """``batch_at`` over batches built beforehand, varying where the objective's batches vary (MLM's masked
    count: compiled as a symbol, leanlm.training.compiling, or a compiled step would compile twice)."""

    def __init__(self, built: list[dict], objective):
        self.built, self.objective = built, objective

    def __call__(self, step: int, micro: int) -> dict:
        return self.built[step]

    def varying_dims(self, batch: dict) -> dict[str, tuple[int, ...]]:
        return self.objective.varying_dims(batch) if hasattr(self.objective, "varying_dims") else {}


class LoopBatches:
    """``batch_at`` of the timed loop: the objective's batches, then the profiled steps' own after ``total``;
    varying where the objective's vary (without ``varying_dims`` a compiled loop compiles twice)."""

    def __init__(self, batches, profiled, total: int):
        self.batches, self.profiled, self.total = batches, profiled, total

    def __call__(self, step: int, micro: int) -> dict:
        return self.batches(step, micro) if step < self.total else self.profiled(step - self.total, micro)

    def varying_dims(self, batch: dict) -> dict[str, tuple[int, ...]]:
        return self.batches.varying_dims(batch) if hasattr(self.batches, "varying_dims") else {}


def clock() -> tuple[float, float]:
    """(wall, process CPU) seconds; CPU time counts every thread of the process, the prefetcher's too."""
    return time.perf_counter(), time.process_time()


def timed_fit(model, config: TrainConfig, batch_at: Callable, warmup: int, device: torch.device,
               profile_steps: int = 0) -> tuple[float, float, float | None, Trainer, dict[str, Any] | None]:
    """(wall, CPU) seconds per step of a Trainer run over ``batch_at``, from the start of step ``warmup``
    to the start of the profiled steps (the end without them); the wall seconds of step 0 with what fit
    does before it (to the start of step 1: the engine's compile probe, where torch.compile compiles,
    runs before step 0); the trainer; and with ``profile_steps`` the last steps' kernel profile
    (:mod:`leanlm.benchmarks.kernel_profile`), taken in the same run so that nothing compiles twice.

    The device is synchronised before each clock reading that bounds a window: at the start of step 1
    (the end of ``first_step_s``, with or without a warm-up) and of step ``warmup``, of the profiled steps,
    and at the end. The engine does
    not wait for the device between steps, so on CUDA the host runs ahead: without the sync where the
    timed window opens, the window held the device's work on the warm-up steps the host had queued (one
    warm-up step and one timed step measured mostly the warm-up step)."""
    from torch.profiler import ProfilerActivity, profile

    from leanlm.benchmarks import kernel_profile

    starts: dict[int, tuple[float, float]] = {}
    profile_opened: list[float] = []  # the wall clock once the profiler runs (its start-up left out)
    first_profiled = config.total_steps - profile_steps
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    profiler = profile(activities=activities) if profile_steps else None

    def step_started(step: int) -> None:
        if step == 1 or step == warmup:
            # A window opens or closes here: step 0's and the warm-up's queued work is done first. With no
            # warm-up, step 1 lies inside the timed window; one sync there costs it one step's host run-ahead.
            _synchronize(device)
        if step == first_profiled and profiler is not None:
            _synchronize(device)  # the timed steps end here, and the profile starts on an idle device
            starts.setdefault(step, clock())
            profiler.start()  # CUPTI's start-up can take a second: outside both windows
            _synchronize(device)
            profile_opened.append(time.perf_counter())
        starts.setdefault(step, clock())

    trainer = Trainer(model, config, batch_at, None, on_step_start=step_started)
    fit_started = clock()
    trainer.fit()  # reads the losses back at the end: the device has finished
    _synchronize(device)
    ended = clock()
    profiled = None
    if profiler is not None:
        profiler.stop()
        profiled = kernel_profile.summarise(profiler.key_averages(), profile_steps, ended[0] - profile_opened[0],
                                            device.type)
        ended = starts[first_profiled]
    (wall, cpu), (wall0, cpu0) = ended, starts[warmup]
    timed = first_profiled - warmup
    first = starts[1][0] - fit_started[0] if 1 in starts else None
    return (wall - wall0) / timed, (cpu - cpu0) / timed, first, trainer, profiled
