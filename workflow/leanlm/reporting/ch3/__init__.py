"""Chapter 3 (MHE attention): Tables 3.1-3.15 and Figures 3.3, 3.4 from runs and counts.

- :mod:`.tables`: Tables 3.1-3.3 (PRR, PEoP by backbone); :mod:`.tasks`: Tables 3.5-3.10 (per task);
- :mod:`.scaling`: Tables 3.14, 3.15 (larger models); :mod:`.results`: the rows they share;
- :mod:`.analytic`: Figures 3.3, 3.4, the GPT-3 projection, thesis-scale parameter counts (:mod:`.counts`).

Tables 3.4, 3.13, 3.11, 3.12 and Figure 3.1 are the shared machinery's own examples
(:mod:`leanlm.reporting.analytic`, :mod:`leanlm.reporting.params_tables`).
"""
