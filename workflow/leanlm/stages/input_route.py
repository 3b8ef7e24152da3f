"""The contract of an input route: how a run's text becomes its model's inputs, in pretraining and
fine-tuning.

A route is a plug-in (``leanlm/routes/<name>.py`` holds ``Route``, found by name through
:data:`leanlm.plugins.INPUT_ROUTES`; :func:`leanlm.plugins.route_name` picks a run's). The stages call the
hooks below at fixed points and import no route, so a job runs (and its code fingerprint holds) only the route
its run takes. A route says which tokenizer a run pretrains and fine-tunes with; the defaults of the other
hooks leave the stage's own work unchanged (its packing of the text, the model as built, the batches as the
objective makes them).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Callable, ClassVar, NamedTuple

import torch

Features = Callable[[torch.Tensor], dict]  # a batch's ids -> the extra per-token inputs its model reads


class PackedCorpus(NamedTuple):
    """A route's own packing of the pretraining corpus: its tokenizer and the train / validation rows."""

    tokenizer: object
    train: object
    validation: object


class InputRoute(abc.ABC):
    """How a run's text becomes its model's inputs (the module docstring)."""

    name: ClassVar[str] = ""  # the route's file name in leanlm/routes

    @abc.abstractmethod
    def pretraining_tokenizer(self, config: dict, run):
        """The tokenizer run ``run`` pretrains with, when the stage packs the corpus itself."""

    @abc.abstractmethod
    def finetuning_tokenizer(self, config: dict, run):
        """The tokenizer run ``run``'s fine-tuning encodes task text with."""

    def packed_corpus(self, config: dict, run, corpus_dir: Path, seq_len: int) -> PackedCorpus | None:
        """The route's own packing of the corpus in ``corpus_dir`` into ``seq_len`` rows, or None: the stage
        packs it with :meth:`pretraining_tokenizer`."""
        return None

    def prepare_model(self, model, tokenizer, data, profile: str) -> dict:
        """Give the built model what it reads beyond its batches, before training; returns what pretrain.json's
        ``data`` records of it (nothing by default)."""
        return {}

    def features(self, model_config, tokenizer) -> Features | None:
        """``ids -> {feature: tensor}`` for a model that reads per-token inputs beyond its ids, else None."""
        return None

    def batches(self, batches, model_config, tokenizer):
        """The objective's pretraining batches, with :meth:`features` added where the model reads them."""
        return batches

    def save(self, tokenizer, directory: Path) -> None:
        """Save beside the model what fine-tuning must encode with beyond the tokenizer (nothing by default)."""
