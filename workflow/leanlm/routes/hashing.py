"""Ch. 2's input route: a hash run's text becomes rows of a hash codebook, and every batch carries the
features its hash embedding reads (HashFormers, ProFormer, EELBERT). The glue between the stages and the
hashing wing, :mod:`leanlm.hashing`:

- pretraining packs the corpus's cached row-id streams (:func:`leanlm.hashing.codebook_streams.codebook_corpus`),
  or, for a run that packs nothing (ProFormer's ``none``), fits a fresh codebook
  (:func:`leanlm.hashing.inputs.pretraining_tokenizer`); the codebook's hasher is saved beside the model;
- fine-tuning hashes task text with that saved codebook (:func:`leanlm.hashing.inputs.finetuning_tokenizer`);
- the features (``hash_bits``, ``hash_buckets``, ``char_ngram_hashes``) are gathered from the codebook per
  batch (:func:`leanlm.hashing.inputs.feature_hook`).

A run takes this route when its ``tokenizer`` is one of :data:`leanlm.runs.HASH_TOKENIZERS`.
"""

from __future__ import annotations

from pathlib import Path

from leanlm.hashing.codebook_streams import codebook_corpus
from leanlm.hashing.inputs import feature_hook, finetuning_tokenizer, pretraining_tokenizer, save_inputs, with_features
from leanlm.stages.input_route import InputRoute, PackedCorpus


class HashingRoute(InputRoute):
    name = "hashing"

    def pretraining_tokenizer(self, config: dict, run):
        return pretraining_tokenizer(config, run)

    def finetuning_tokenizer(self, config: dict, run):
        return finetuning_tokenizer(config, run)

    def packed_corpus(self, config: dict, run, corpus_dir: Path, seq_len: int) -> PackedCorpus:
        # A codebook of words or of the run's tokenizer's pieces, its rows and the corpus's row-id streams,
        # built once per (codebook, corpus) and memory-mapped.
        packed = codebook_corpus(config, run, corpus_dir, seq_len)
        return PackedCorpus(packed.tokenizer, packed.train, packed.validation)

    def features(self, model_config, tokenizer):
        return feature_hook(model_config, tokenizer)

    def batches(self, batches, model_config, tokenizer):
        return with_features(batches, model_config, tokenizer)

    def save(self, tokenizer, directory: Path) -> None:
        save_inputs(tokenizer, directory)  # the codebook's hasher (no rows): fine-tuning hashes with it


Route = HashingRoute
