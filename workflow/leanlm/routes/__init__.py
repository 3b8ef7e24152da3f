"""Input routes: how a run's text becomes its model's inputs, one file a route (the folder is the registry,
:data:`leanlm.plugins.INPUT_ROUTES`; ``<name>.py`` holds ``Route``, a :class:`leanlm.stages.input_route.InputRoute`).

- :mod:`~leanlm.routes.subword`: the subword tokenizer's ids (the profile's, or the run's named one);
- :mod:`~leanlm.routes.fixed_text`: ch. 4's route, subword ids plus FixedSeqQK's fixed text;
- :mod:`~leanlm.routes.hashing`: ch. 2's route, hash-codebook rows and their features
  (the wing :mod:`leanlm.hashing`).

:func:`leanlm.plugins.route_name` picks a run's route from its settings; the stages ask for it by name and
import no route, so a job's code fingerprint holds only the route its run takes (:mod:`leanlm.job_code`).
"""
