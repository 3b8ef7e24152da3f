"""``hub``: an off-the-shelf pretrained checkpoint as the run's model (ch. 2's CANINE-C; no training here).

See :mod:`leanlm.training.hub_checkpoint` for loading such a checkpoint for fine-tuning and CANINE's
character tokenizer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.io import write_json
from leanlm.modeling.checkpoint import CONFIG_NAME, WEIGHTS_NAME
from leanlm.modeling.counting import total_parameters
from leanlm.provenance import hardware
from leanlm.training.hub_checkpoint import hash_embedding_parameters
from leanlm.stages.pretrain import PretrainObjective, record_head


class HubCheckpoint(PretrainObjective):
    """Save the run's ``hub_checkpoint`` as its pretrained model (no training here)."""

    def run(self, config: dict, run) -> dict:
        if not run.hub_checkpoint:
            raise ConfigError(f"{config['_params_file']}: run {run.run_id} has objective hub but no "
                              f"hub_checkpoint (e.g. google/canine-c)")
        profile = config["profile"]
        source = run.hub_checkpoint
        load_from = source
        if not Path(source).is_dir():
            from leanlm.data.sources.hub import ensure_hub_reachable
            from leanlm.data.plumbing.mirror import mirrored_model

            load_from = mirrored_model(source, profile)  # the hub mirror's copy, when one is set
            if load_from is None:
                ensure_hub_reachable(f"checkpoint {source}", profile)
                load_from = source
        from transformers import AutoModel

        try:
            model = AutoModel.from_pretrained(str(load_from))
        except Exception as err:  # transformers raises OSError/ValueError/HTTP errors
            raise DataError(f"run {run.run_id}: could not load hub checkpoint {source!r}: {err}") from err
        out_dir = paths.models_dir(profile) / run.run_id
        out_dir.mkdir(parents=True, exist_ok=True)
        # save_pretrained writes in place; write beside and move, weights first (as save_checkpoint).
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".hub-") as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            for name in (WEIGHTS_NAME, CONFIG_NAME):
                os.replace(Path(tmp) / name, out_dir / name)
        record = {
            **record_head(config, run, model.config.to_dict(), {}, hub_checkpoint=source),
            "summary": {"steps": 0, "pretrained": "hub"},
            "history": [],
            "validation": {},
            "parameters": {"total": total_parameters(model), "attention": None, "embedding": None,
                           "word_embedding": hash_embedding_parameters(model)},
            "timing": {"seconds": 0.0, "seconds_per_sample": None},
            "hardware": hardware(),
        }
        write_json(paths.results_dir(profile) / "runs" / run.run_id / "pretrain.json", record)
        return record


Objective = HubCheckpoint
