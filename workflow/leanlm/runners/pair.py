"""``pair``: GLUE-style text-pair classification and regression, the engine's own fine-tuning loop
(:func:`leanlm.training.finetune.finetune_task`, shared with every runner)."""

from leanlm.training.finetune import TextClassificationRunner as Runner  # noqa: F401
