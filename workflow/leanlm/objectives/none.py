"""The ``none`` pretraining objective: a model that is not pretrained (ProFormer, ch. 2).

ProFormer "is trained from scratch using task-specific data without any pre-training" (§2.2.1). The
pipeline keeps one shape for every run (pretrain job -> fine-tune jobs), so for these runs the
pretrain job only writes the initialised model (its pretraining seed: 0, or a replica's own) and its hash codebook, and a pretrain.json
whose timing says no pretraining happened (``seconds`` 0, ``seconds_per_sample`` None). Fine-tuning
then starts every task from that initialisation: a from-scratch training per task. (LSH still fits
its character n-gram vocabulary on the pretraining corpus's words, as for the HashFormers-LSH.)
"""

from __future__ import annotations

import logging

from leanlm import paths
from leanlm.io import write_json
from leanlm.modeling.checkpoint import save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.plugins import input_route
from leanlm.provenance import hardware
from leanlm.stages.pretrain import PretrainObjective, parameter_counts, record_head
from leanlm.training.seeding import seed_everything

log = logging.getLogger(__name__)


class NoPretraining(PretrainObjective):
    """Save the initialised encoder; fine-tuning takes it over (``transfer_backbone``)."""

    # Any registered head of the backbone works: only its encoder is taken over. S+R's 3-way head is
    # the smallest one BERT has.
    head = "shuffle_random"

    def run(self, config: dict, run) -> dict:
        profile = config["profile"]
        route = input_route(run)  # ProFormer's: ch. 2's hashing route
        tokenizer = route.pretraining_tokenizer(config, run)
        model_config = ModelConfig.from_dict({**run.model, "vocab_size": tokenizer.get_vocab_size()},
                                             where=f"run {run.run_id}")
        seed_everything(run.pretrain_seed)  # the initialisation: PRETRAIN_SEED, or a replica's own seed
        model = build_model(model_config, self.head)
        out_dir = paths.models_dir(profile) / run.run_id
        route.save(tokenizer, out_dir)
        save_checkpoint(model, model_config, out_dir,
                        extra={"run_id": run.run_id, "profile": profile, "pretrained": False})
        record = {
            **record_head(config, run, model_config.to_dict(), {}),
            "summary": {"steps": 0, "pretrained": False},
            "history": [],
            "validation": {},
            "parameters": parameter_counts(model),
            "timing": {"seconds": 0.0, "seconds_per_sample": None},
            "hardware": hardware(),
        }
        write_json(paths.results_dir(profile) / "runs" / run.run_id / "pretrain.json", record)
        log.info("%s: not pretrained (objective none); saved the initialised model", run.run_id)
        return record


Objective = NoPretraining
