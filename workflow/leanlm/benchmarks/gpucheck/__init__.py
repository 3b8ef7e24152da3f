"""``leanlm gpu-check`` and ``make gpu-bundle``: the first contact of this project with a GPU (docs/gpu-check.md).

GPU time comes rarely and briefly, so the check is prepared on a CPU and cannot fail there for a reason a
CPU could find: ``leanlm gpu-check --device cpu --tiny`` runs every section at tiny sizes in CI.

- :mod:`.check`: the sections in priority order under one time budget, and the command;
- :mod:`.record`: ``gpu_check.json``, written after every sub-step; budgets, skips, failures, OOM;
- :mod:`.environment`: section 1, the device and which SDPA kernel each attention variant gets;
- :mod:`.throughput`: sections 2 and 3, BERT-base and ch. 4's decoders through ``leanlm bench``'s code;
- :mod:`.reference`, :mod:`.correctness`: section 4, leanlm against its ``transformers`` twin and a CPU
  fp32 reference;
- :mod:`.pipeline`: section 5, ``leanlm pretrain`` / ``finetune`` of one run per chapter;
- :mod:`.bundle`, :mod:`.device`: what travels to the device (data, reference, wheels) and how it is run.
"""
