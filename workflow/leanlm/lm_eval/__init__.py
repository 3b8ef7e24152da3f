"""Chapter 4's evaluation with lm-evaluation-harness (§4.4.1, §4.4.3), in one place.

- :mod:`~leanlm.lm_eval.configs`: lm-eval's own task configs, read offline (the metric lists);
- :mod:`~leanlm.lm_eval.metrics`: lm-eval's metric names in the project's metric registry;
- :mod:`~leanlm.lm_eval.standins`: the packaged local-JSON stand-ins of the thesis's tasks;
- :mod:`~leanlm.lm_eval.mirror`: lm-eval's tasks reading their documents from the hub mirror;
- :mod:`~leanlm.lm_eval.stage`: the data stage's part that writes the lm-eval tasks of a profile;
- :mod:`~leanlm.lm_eval.adapter`: our causal LMs as an lm-eval model;
- :mod:`~leanlm.lm_eval.baselines`: Table 4.1's random-guess and majority rows.

It sits above the data and evaluation floors (it reads both) and below the runners
(:mod:`leanlm.runners.lm_eval`, :mod:`leanlm.runners.analysis`), which import it.
"""
