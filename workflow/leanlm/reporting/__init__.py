"""leanlm.reporting: aggregation, tables, figures.

Shared machinery here: :mod:`.aggregate` (runs -> one tidy table per experiment, and all_runs.csv),
:mod:`.derived` (PRR, PEoP, ...),
:mod:`.render` (tables: formatting, checks, writing .tex/.csv), :mod:`.analytic` (outputs that need no
training), :mod:`.grid` and :mod:`.latex` (templates, the PDF), :mod:`.figures` (plot style),
:mod:`.reported` (the thesis's printed numbers), :mod:`.params_tables` (hyperparameter tables).

Each chapter's tables and figures live in its own folder, :mod:`.ch2`, :mod:`.ch3`, :mod:`.ch4`, and are
named by dotted path in params/tables.yaml (``renderer:``). The machinery never imports a chapter; a
chapter imports the machinery, never another chapter.
"""
