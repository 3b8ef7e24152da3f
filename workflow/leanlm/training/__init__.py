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

The names below import on first use (PEP 562): planning reads ``training.schedules`` (a warm-up that
trains nothing is refused when a profile loads) and must not import the engine, and with it torch.
"""

from __future__ import annotations

import importlib

_MODULE_OF = {"TrainConfig": "leanlm.training.engine", "Trainer": "leanlm.training.engine",
              "lr_multiplier": "leanlm.training.schedules", "schedule_fn": "leanlm.training.schedules",
              "warmup_steps_from_ratio": "leanlm.training.schedules"}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'leanlm.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
