"""Time per sample for Table 2.3: pretraining (forward + backward + update) and inference (forward).

The thesis measures "the average time of a sample completing a PT or Infer step" (§2.4.4). Both
clocks wrap what already runs, so timing needs no change to the engine:

- :class:`StepClock` is the engine's ``on_step_start`` listener: it notes when each optimizer step
  starts, and :meth:`StepClock.finish` when ``fit`` returns. (It used to wrap ``batch_at``; with batches
  built ahead in a background thread, the time a batch is asked for is no longer the time its step
  starts.) Time per sample is the wall time from the start of the second step to the end, over the
  samples of those steps: the first step (allocator warm-up, lazy initialisation, cuDNN/CPU kernel
  selection, compilation) is left out, as is everything before training (tokenising, packing). The
  span includes what the engine does between steps (logging, the periodic checkpoint), as a real run
  pays for it. On an accelerator the loop reads the device back only at log/eval/checkpoint
  boundaries, so single steps' ``step_seconds`` are launch times while their sum is exact (``fit``
  reads everything back before it returns).
- :class:`InferenceClock` sums the forward passes of an evaluation (``predict``), which end with the
  ``.tolist()`` that synchronises an accelerator, and the examples they scored.
"""

from __future__ import annotations

import time


class StepClock:
    """Records the start time of each optimizer step (``Trainer(on_step_start=clock.mark)``)."""

    def __init__(self, samples_per_step: int):
        self.samples_per_step = int(samples_per_step)  # the global batch: all ranks together
        self.starts: dict[int, float] = {}
        self.end: float | None = None

    def mark(self, step: int) -> None:
        if step not in self.starts:
            self.starts[step] = time.perf_counter()

    def finish(self) -> None:
        self.end = time.perf_counter()

    def timing(self) -> dict:
        """``seconds_per_sample`` (None when fewer than two steps ran in this session) and what it
        was measured over."""
        steps = sorted(self.starts)
        if len(steps) < 2 or self.end is None:
            return {"seconds_per_sample": None, "timed_steps": 0}
        timed = len(steps) - 1
        seconds = self.end - self.starts[steps[1]]
        # Each timed step's wall time (they sum to timed_seconds): a claim's interval resamples them.
        bounds = [self.starts[s] for s in steps[1:]] + [self.end]
        step_seconds = [round(b - a, 6) for a, b in zip(bounds, bounds[1:])]
        return {"seconds_per_sample": seconds / (timed * self.samples_per_step), "timed_steps": timed,
                "timed_seconds": seconds, "samples_per_step": self.samples_per_step, "step_seconds": step_seconds}


class InferenceClock:
    """Accumulates forward-pass seconds and examples over the ``predict`` calls it is given to."""

    def __init__(self):
        self.seconds = 0.0
        self.examples = 0

    def add(self, seconds: float, examples: int) -> None:
        self.seconds += seconds
        self.examples += examples

    @property
    def seconds_per_sample(self) -> float | None:
        return self.seconds / self.examples if self.examples else None


def inference_timing(results: list[dict]) -> dict:
    """A family record's ``timing`` entries from its per-task results' inference seconds and
    examples: ``inference_seconds_per_sample`` over every task and seed (None if none measured)."""
    seconds = sum(r.get("inference_seconds", 0.0) for r in results)
    examples = sum(r.get("inference_examples", 0) for r in results)
    return {"inference_seconds_per_sample": seconds / examples if examples else None,
            "inference_examples": examples}
