"""The task families' builders (params/tasks/*.yaml): each family's hub loader with its packaged stand-ins
beside it. :mod:`leanlm.data.task_sources` names, per source, the builder of each family."""
