"""``seq2seq``: BLEU of the trained encoder-decoder (ch. 3's translation), decoded with beam search.

The runner lives beside the ``translation`` objective that trains the model, whose BPE and decoding it shares
(:mod:`leanlm.objectives.translation`)."""

from leanlm.objectives.translation import TranslationRunner as Runner  # noqa: F401
