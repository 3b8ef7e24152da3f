"""leanlm.training: one compact training engine for pretraining and fine-tuning (DESIGN.md §7).

- ``engine``: ``TrainConfig`` and ``Trainer`` (AdamW, schedules, accumulation, clipping, autocast,
  evaluation with early stopping, atomic checkpoints and exact resume, DDP).
- ``schedules``: learning-rate multipliers as pure functions of the step.
- ``objectives``: BERT's MLM masking and sequence packing (data side of pretraining).
- ``checkpointing``, ``seeding``, ``distributed``: the pieces the engine is built from.
- ``pretrain``, ``finetune``: the stages (``leanlm pretrain`` / ``finetune``), which find the run's
  objective (:mod:`leanlm.objectives`) and the tasks' runners (:mod:`leanlm.runners`) by dotted path and
  never import them; ``hash_inputs``, ``hub_checkpoint``, ``text_batches``, ...: the inputs they share.
"""

from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.schedules import lr_multiplier, schedule_fn, warmup_steps_from_ratio

__all__ = ["TrainConfig", "Trainer", "lr_multiplier", "schedule_fn", "warmup_steps_from_ratio"]
