"""Benchmarks, apart from the library layers (timing lives here and in docs/benchmarks.md, never in tests).

- :mod:`.pretraining`: ``leanlm bench``, tokens/s and MFU of the encoder's pretraining step;
- :mod:`.parity`: ``leanlm bench --parity``, our backbones against their ``transformers`` twins;
- :mod:`.objective_speed`: ``leanlm bench --speed`` (rule ``pretraining_speed``), ch. 2's pretraining time
  per sample, MLM against S+R and the HashFormers (Table 2.3, the speed claims);
- :mod:`.mixers`: ``python -m leanlm.benchmarks.mixers``, ch. 4's token mixers against Standard;
- :mod:`.hashing`: ``python -m leanlm.benchmarks.hashing``, ch. 2's hashing and hash-embedded steps.

They import the core; no core module imports them (``leanlm.cli`` runs ``bench``; tests/test_layering.py).
"""
