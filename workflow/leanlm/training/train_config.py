"""``TrainConfig``: the optimisation settings of one run, checked on construction.

Field names follow params/*.yaml; a bad value raises ConfigError naming the field and what it must be.
"""

from __future__ import annotations

from dataclasses import dataclass

from leanlm.errors import ConfigError
from leanlm.training.compiling import valid_compile
from leanlm.training.schedules import SCHEDULES

PRECISIONS = ("auto", "fp32", "bf16")
# Settings that change the numbers a run produces: resuming a checkpoint written under other values
# would silently mix two runs, so it is refused. (progress, desc, log_every, checkpoint_every may change.)
_RUN_DEFINING = (
    "total_steps", "lr", "schedule", "warmup_steps", "num_cycles", "weight_decay", "adam_betas",
    "adam_eps", "grad_accum", "clip_norm", "seed", "precision", "eval_every", "early_stopping_patience",
)


@dataclass
class TrainConfig:
    """Optimisation settings of one run (field names as in params/*.yaml)."""

    total_steps: int
    lr: float
    schedule: str = "linear"  # linear | cosine | cosine_with_hard_restarts | constant
    warmup_steps: int = 0
    num_cycles: int = 1  # cycles of cosine_with_hard_restarts
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    grad_accum: int = 1
    clip_norm: float | None = 1.0  # None: no clipping
    seed: int = 0
    checkpoint_every: int | None = None  # steps; None: no checkpoints
    log_every: int = 10
    precision: str = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU | fp32 | bf16
    eval_every: int | None = None  # steps; None: evaluate at the end only
    early_stopping_patience: int | None = None  # evaluations without improvement before stopping
    progress: bool = True
    desc: str = "train"
    # Micro-batches built ahead in a background thread (leanlm.training.prefetch); 0 builds each inline.
    # Any value gives the same batches, losses and weights.
    prefetch: int = 2
    # torch.compile the module that trains: "auto" on CUDA only (leanlm.training.compiling says why), true,
    # or false. Kernels fused; losses agree with eager to float rounding, not bit for bit. Not
    # run-defining: a run may be resumed with it switched.
    compile: bool | str = "auto"
    # Recompute each transformer block in the backward instead of keeping its activations
    # (leanlm.modeling.recompute): same losses and gradients to float rounding, a fraction of the
    # activation memory, about a third more compute. Not run-defining, like compile.
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.adam_betas, list):
            self.adam_betas = tuple(self.adam_betas)  # YAML gives a list
        is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
        checks = [
            ("total_steps", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
            ("lr", lambda v: v > 0, "a number > 0"),
            ("schedule", lambda v: v in SCHEDULES, f"one of {', '.join(SCHEDULES.names())}"),
            ("warmup_steps", lambda v: is_int(v) and 0 <= v <= self.total_steps,
             "an integer in [0, total_steps]"),
            ("num_cycles", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
            ("weight_decay", lambda v: v >= 0, "a number >= 0"),
            ("adam_betas", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
            ("adam_eps", lambda v: v > 0, "a number > 0"),
            ("grad_accum", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
            ("clip_norm", lambda v: v is None or v > 0, "null or a number > 0"),
            ("checkpoint_every", lambda v: v is None or (is_int(v) and v >= 1), "null or an integer >= 1"),
            ("log_every", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
            ("precision", lambda v: v in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
            ("eval_every", lambda v: v is None or (is_int(v) and v >= 1), "null or an integer >= 1"),
            ("early_stopping_patience", lambda v: v is None or (is_int(v) and v >= 1),
             "null or an integer >= 1"),
            ("prefetch", lambda v: is_int(v) and v >= 0, "an integer >= 0 (0: build batches inline)"),
            ("compile", valid_compile, "auto, true or false"),
            ("activation_checkpointing", lambda v: isinstance(v, bool), "true or false"),
        ]
        for name, ok, want in checks:
            value = getattr(self, name)
            try:
                good = bool(ok(value))
            except (TypeError, ValueError):  # None, strings, ... where numbers belong
                good = False
            if not good:
                raise ConfigError(f"TrainConfig.{name}={value!r} must be {want}")
