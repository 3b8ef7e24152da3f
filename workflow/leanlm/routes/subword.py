"""The subword route: a run's text becomes the ids of its subword tokenizer (chs. 2-3's BERTs and GPT-2 on
the profile's WordPiece, ch. 2's BERTs on RoBERTa's BPE).

Pretraining packs the corpus with the run's named tokenizer (``pretrain_data.tokenizer``) or the profile's
(:func:`leanlm.training.run_tokenizer.subword_tokenizer`); fine-tuning encodes with the copy saved beside
the model for a run with a named tokenizer (:func:`~leanlm.training.run_tokenizer.evaluation_tokenizer`),
with the profile's otherwise, and CANINE-C (objective ``hub``) with its characters. A hash embedding cannot
read these ids: :func:`leanlm.runs.check_run_tokenizer` refuses it before any data is read.
"""

from __future__ import annotations

from leanlm.modeling.config import ModelConfig
from leanlm.runs import check_run_tokenizer
from leanlm.stages.input_route import InputRoute
from leanlm.training.run_tokenizer import evaluation_tokenizer, subword_tokenizer


class SubwordRoute(InputRoute):
    name = "subword"

    def pretraining_tokenizer(self, config: dict, run):
        check_run_tokenizer(run, ModelConfig.from_dict({**run.model, "vocab_size": 1}, where=f"run {run.run_id}"))
        return subword_tokenizer(config, run)

    def finetuning_tokenizer(self, config: dict, run):
        if run.objective == "hub":
            from leanlm.training.hub_checkpoint import CharTokenizer

            return CharTokenizer()
        if run.pretrain_tokenizer:
            return evaluation_tokenizer(config, run.run_id, None)
        from leanlm.data.tokenizer import load_tokenizer

        return load_tokenizer(config["profile"])


Route = SubwordRoute
