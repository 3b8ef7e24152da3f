"""Chapter 2 (HashFormers): Tables 2.1-2.6, the side-by-side table and Table 2.2's parameter counts.

- :mod:`.tables`: Tables 2.1, 2.2, 2.6 (results) and 2.4, 2.5 (hyperparameters);
- :mod:`.speed`: Table 2.3 (time per sample) and the side-by-side table with the related models;
- :mod:`.analytic`: Table 2.2's parameter counts at BERT-base; :mod:`.counts`, :mod:`.results`: their data.
"""
