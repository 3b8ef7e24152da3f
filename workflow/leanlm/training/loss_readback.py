"""When the training loop reads its losses back to the host, and what it does with a non-finite one.

Why this exists: reading a loss on an accelerator (``.item()``, ``.tolist()``) makes the host wait until
the device has run every kernel queued so far, so a read each step stalls the loop once per step. On an
accelerator the engine therefore keeps each step's ``[loss, tokens]`` on the device and reads the steps
not yet read in one go, only at log, evaluation and checkpoint steps (:meth:`LossReadback.read`). On
CPU a read waits for nothing and each step is read at once, before its update.

The price of reading late is that a non-finite loss is seen steps after it happened. No update may use
it, so on an accelerator the decision stays on the device: the fused AdamW skips its step while its
``found_inf`` is 1 (as under a GradScaler), and :meth:`LossReadback.add` sets it to 1 from the first
non-finite step on, until the next read raises a TrainingError naming that step and the later steps
whose updates were skipped with it. On CPU the read raises before the update, which is never made.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import torch

from leanlm.errors import TrainingError


def defers_checks(device: torch.device) -> bool:
    """Whether the loop reads losses at boundaries only (accelerators) rather than every step (CPU, where
    a read costs nothing): the skip of a non-finite step then needs the fused AdamW's ``found_inf``."""
    return device.type == "cuda"


class LossReadback:
    """The steps whose loss and token count are still on the device, and their one read back.

    ``deferred`` (see :func:`defers_checks`) says whether the reads wait for the loop's boundaries;
    ``optimizer`` is the run's AdamW (fused when ``deferred``), whose update a non-finite step must not
    reach; ``run_dir`` and ``lr`` only name the run in the error.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, deferred: bool, run_dir: Path | None, lr: float):
        self.optimizer, self.deferred = optimizer, deferred
        self.run_dir, self.lr = run_dir, lr
        self.pending: list[tuple[int, float, torch.Tensor]] = []  # (step, lr, [loss, tokens]) not yet read
        self._nonfinite: torch.Tensor | None = None  # deferred checks: 1.0 once a step's loss was not finite

    def add(self, step: int, lr: float, stats: torch.Tensor) -> None:
        """Hold step ``step``'s ``stats`` (``[loss, tokens]``, summed over ranks) until the next read.

        With deferred reads, also mark on the device whether its loss is finite, so that the optimizer's
        coming update is skipped if not. Without, the caller reads at once (before the update)."""
        if self.deferred:
            # No update from a non-finite loss, decided on the device: the fused AdamW skips its step while
            # found_inf is 1 (as under a GradScaler); it stays 1 until the next read raises.
            bad = (~torch.isfinite(stats[0])).float()
            self._nonfinite = bad if self._nonfinite is None else torch.maximum(self._nonfinite, bad)
            self.optimizer.found_inf = self._nonfinite
        self.pending.append((step, lr, stats))

    def read(self, world_size: int) -> Iterator[tuple[int, float, float, float]]:
        """Read the held steps (one device sync) and yield ``(step, lr, loss, tokens)`` for each, in step
        order, the loss averaged over the ``world_size`` ranks; raise TrainingError at the first
        non-finite loss, naming its step (the steps before it are yielded first, so they are recorded)."""
        values = torch.stack([stats for _, _, stats in self.pending]).tolist()
        pending, self.pending = self.pending, []
        for (step, lr, _), (loss_sum, step_tokens) in zip(pending, values):
            loss_value = loss_sum / world_size
            if not math.isfinite(loss_value):
                self.optimizer.zero_grad(set_to_none=True)
                last = pending[-1][0]  # losses are read back at log/eval/checkpoint steps on an accelerator
                later = ("" if last == step else f"; so was the update of step {last}" if last == step + 1
                         else f"; so were the updates of steps {step + 1} to {last}")
                raise TrainingError(
                    f"loss is {loss_value} at step {step} (0-based; the batches of batch_at({step}, ...)) "
                    f"of run {self.run_dir}; no update was made with it{later}. Lower the learning rate "
                    f"(lr={self.lr}), check the data of that step, or try precision='fp32'"
                )
            yield step, lr, loss_value, step_tokens
