"""Fine-tuning and evaluation runners, one file each: the folder is the registry, the file name the runner's.

A task's ``input_shape`` (params/tasks.yaml: ``single``, ``pair``, ``multiple_choice``, ``span_qa``,
``seq2seq``, ``lm``), or a family that owns its runner (ch. 4's ``lm_eval``, ``analysis``), picks class
``Runner`` of ``leanlm.runners.<name>`` (:data:`leanlm.stages.finetune.TASK_RUNNERS`, resolved by dotted
path when a job asks for it; a missing file fails loudly). A new runner is one new file here deriving from
:class:`~leanlm.stages.finetune.TaskRunner`; the core (:mod:`leanlm.training`) never imports this package.
"""
