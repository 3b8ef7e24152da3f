"""Learning-rate schedules as pure functions of the optimizer step.

The thesis pretrains with a linear schedule after 10,000 warmup steps (Table 3.11) and fine-tunes with
"cosine with hard restarts" after warming up over the first 6% of steps (Table 3.12). Each schedule here
is a multiplier of the peak learning rate, ``lr(step) = peak_lr * multiplier(step)``, where ``step`` is
the 0-based index of the optimizer update. The conventions are those of the Hugging Face ``Trainer`` the
thesis used (so the numbers mean the same thing): the multiplier rises linearly from 0 at step 0 to 1
at ``warmup_steps``, and the decaying schedules reach 0 at ``total_steps``. Being pure functions of the
step, they need no state of their own: resuming at step ``s`` gives exactly the learning rate an
uninterrupted run had at ``s``.
"""

from __future__ import annotations

import math
from typing import Callable

from leanlm.errors import ConfigError
from leanlm.registry import Registry

# name -> multiplier(step, total_steps, warmup_steps, num_cycles)
SCHEDULES: Registry[Callable[[int, int, int, int], float]] = Registry("learning-rate schedule")


def _warmup(step: int, warmup_steps: int) -> float:
    return step / max(1, warmup_steps)


def _progress(step: int, total_steps: int, warmup_steps: int) -> float:
    """Fraction of the post-warmup phase done at ``step`` (0 at the end of warmup, 1 at the end)."""
    return (step - warmup_steps) / max(1, total_steps - warmup_steps)


@SCHEDULES.register("constant")
def constant(step: int, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1) -> float:
    """1 after warmup (linear warmup first when ``warmup_steps`` > 0)."""
    return _warmup(step, warmup_steps) if step < warmup_steps else 1.0


@SCHEDULES.register("linear")
def linear(step: int, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1) -> float:
    """Linear warmup to 1, then linear decay to 0 at ``total_steps`` (Table 3.11)."""
    if step < warmup_steps:
        return _warmup(step, warmup_steps)
    return max(0.0, 1.0 - _progress(step, total_steps, warmup_steps))


@SCHEDULES.register("cosine")
def cosine(step: int, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1) -> float:
    """Linear warmup to 1, then half a cosine from 1 down to 0 at ``total_steps``."""
    if step < warmup_steps:
        return _warmup(step, warmup_steps)
    progress = min(1.0, _progress(step, total_steps, warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


@SCHEDULES.register("cosine_with_hard_restarts")
def cosine_with_hard_restarts(
    step: int, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1
) -> float:
    """Linear warmup, then ``num_cycles`` half-cosines from 1 to 0, each restarting at 1 (Table 3.12).

    With ``num_cycles=1`` it equals ``cosine``.
    """
    if step < warmup_steps:
        return _warmup(step, warmup_steps)
    progress = _progress(step, total_steps, warmup_steps)
    if progress >= 1.0:
        return 0.0
    return 0.5 * (1.0 + math.cos(math.pi * ((num_cycles * progress) % 1.0)))


@SCHEDULES.register("inverse_sqrt")
def inverse_sqrt(step: int, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1) -> float:
    """Linear warmup to 1, then decay with the inverse square root of the step (Vaswani et al., 2017).

    The paper's lr = d_m^-0.5 * min(step^-0.5, step * warmup^-1.5) peaks at ``warmup_steps``; as a
    multiplier of that peak it is sqrt(warmup_steps / step) afterwards (fairseq's ``inverse_sqrt``).
    It does not reach 0 at ``total_steps``. Without warmup it starts at 1 and decays from step 1.
    """
    if step < warmup_steps:
        return _warmup(step, warmup_steps)
    return math.sqrt(max(1, warmup_steps) / max(1, step))


def lr_multiplier(
    schedule: str, step: int, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1
) -> float:
    """Multiplier of the peak learning rate for optimizer update ``step`` (0-based)."""
    return SCHEDULES.get(schedule)(step, total_steps, warmup_steps, num_cycles)


def schedule_fn(
    schedule: str, total_steps: int, warmup_steps: int = 0, num_cycles: int = 1
) -> Callable[[int], float]:
    """Bind a schedule's settings, giving the pure function ``multiplier(step)``.

    Unknown names raise ``ConfigError`` listing the known ones.
    """
    fn = SCHEDULES.get(schedule)
    if not 0 <= warmup_steps <= total_steps:
        raise ConfigError(
            f"warmup_steps={warmup_steps} must lie in [0, total_steps={total_steps}]; "
            "lower warmup_steps (or warmup_ratio) in the params file"
        )
    if num_cycles < 1:
        raise ConfigError(f"num_cycles={num_cycles} must be >= 1 for schedule {schedule!r}")

    def multiplier(step: int) -> float:
        return fn(step, total_steps, warmup_steps, num_cycles)

    return multiplier


def warmup_steps_from_ratio(total_steps: int, warmup_ratio: float) -> int:
    """Warmup steps for "the first 6% steps" (Table 3.12): ``ceil(ratio * total_steps)``, as HF does."""
    if not 0.0 <= warmup_ratio <= 1.0:
        raise ConfigError(f"warmup_ratio={warmup_ratio} must lie in [0, 1]")
    return math.ceil(total_steps * warmup_ratio)
