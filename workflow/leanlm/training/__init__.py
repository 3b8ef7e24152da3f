"""leanlm.training: one compact training engine for pretraining and fine-tuning (DESIGN.md §7).

- ``engine``: ``TrainConfig`` and ``Trainer`` (AdamW, schedules, accumulation, clipping, autocast,
  evaluation with early stopping, atomic checkpoints and exact resume, DDP).
- ``schedules``: learning-rate multipliers as pure functions of the step.
- ``objectives``: BERT's MLM masking and sequence packing (data side of pretraining).
- ``checkpointing`` (and what a resume must match), ``optimizer`` (AdamW's groups), ``precision``
  (autocast), ``seeding``, ``distributed`` (ranks, DDP, the per-rank accumulation): the pieces the engine
  is built from.
- ``hub_checkpoint``, ``text_batches``, ``eos_packing``, ...: the inputs the stages share.

The stages that use the engine (``leanlm pretrain`` / ``finetune``) are :mod:`leanlm.stages`; ch. 2's hash
inputs are :mod:`leanlm.hashing`'s wing. Nothing here imports either.
"""

from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.schedules import lr_multiplier, schedule_fn, warmup_steps_from_ratio

__all__ = ["TrainConfig", "Trainer", "lr_multiplier", "schedule_fn", "warmup_steps_from_ratio"]
