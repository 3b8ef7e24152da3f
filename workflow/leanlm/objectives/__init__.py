"""Pretraining objectives, one file each: the folder is the registry, the file name the objective's name.

An experiment's ``objective: <name>`` runs class ``Objective`` of ``leanlm.objectives.<name>``
(:data:`leanlm.stages.pretrain.OBJECTIVES`, resolved by dotted path when a job asks for it; a missing
file fails loudly). A new objective is one new file here deriving from
:class:`~leanlm.stages.pretrain.PretrainObjective` (or ``PackedTextObjective`` for packed text); the
core (:mod:`leanlm.training`) never imports this package.
"""
