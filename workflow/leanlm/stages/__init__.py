"""The pipeline's stages that train and evaluate a run (``leanlm pretrain`` / ``leanlm finetune``).

- :mod:`~leanlm.stages.pretrain`: pretrain one model of the matrix with its objective;
- :mod:`~leanlm.stages.finetune`: fine-tune and evaluate one model on every task of a family, every seed;
- :mod:`~leanlm.stages.lm_finetune`: fine-tuning a decoder on a language-modelling benchmark (Table 3.2).

They use the training engine (:mod:`leanlm.training`) and find the run's objective
(:mod:`leanlm.objectives`) and the tasks' runners (:mod:`leanlm.runners`) by dotted path, never
importing them; the objectives and runners import the stages' base classes.
"""
