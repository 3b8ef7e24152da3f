"""Chapter 4 (deconstructing dot-product attention): Tables 4.1-4.11 and Figures 4.1-4.8.

- :mod:`.tables`: Tables 4.1-4.4 (lm-eval scores); :mod:`.params_tables`: Tables 4.9, 4.11;
- :mod:`.analytic`: Tables 4.5-4.8 (formulas measured, :mod:`.formulas`) and 4.10 (Qwen sizes);
- :mod:`.figures`: Figures 4.1, 4.2, 4.6-4.8 (indicators, logits); :mod:`.figures_runs`: 4.3-4.5 (layouts,
  sizes, loss curves); :mod:`.records`: reading the runs' analysis records.
"""
