"""``pair``: GLUE-style text-pair classification and regression, the engine's own fine-tuning loop
(:func:`leanlm.stages.finetune.finetune_task`, shared with every runner)."""

from leanlm.stages.finetune import TextClassificationRunner as Runner  # noqa: F401
