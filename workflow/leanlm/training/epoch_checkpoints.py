"""The checkpoints of the last epochs of a training run, kept for averaging their scores.

WMT-14 (§3.4.4): "We use one random seed and report the average on the last five epochs." Training runs
for a number of steps (100K), not of epochs, so an epoch is ``ceil(train examples / examples per step)``
steps and training ends inside the last one (epoch ``ceil(total / steps_per_epoch)``). The checkpoints
are the weights at the end of each of the last ``keep`` epochs, the last being the end of training: the
run's model itself, so only ``keep - 1`` more are written, each into ``<model dir>/epochs/epoch-<k>/``
(``model.safetensors`` + ``config.json``); earlier epochs are never written. ``epochs/EPOCHS.json``
lists them all, oldest first: ``{"steps_per_epoch", "keep", "checkpoints": [{"epoch", "step", "dir"}]}``
with ``dir`` relative to the model directory ("." for the run's model). The translation runner scores
each and reports the mean (:mod:`leanlm.objectives.translation`).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from torch import nn

from leanlm.errors import ConfigError, DataError
from leanlm.io import write_json
from leanlm.modeling.checkpoint import save_checkpoint
from leanlm.modeling.config import ModelConfig

log = logging.getLogger(__name__)

EPOCHS_DIR = "epochs"
MANIFEST = "EPOCHS.json"


class LastEpochCheckpoints:
    """Writes the last ``keep`` epochs' weights of a run of ``total_steps`` steps (see the module docstring).

    :meth:`save` is the trainer's ``evaluate`` hook, called every ``steps_per_epoch`` steps with the
    model; ``step()`` gives the trainer's completed step count at that moment.
    """

    def __init__(self, model_dir: Path, config: ModelConfig, keep: int, steps_per_epoch: int, total_steps: int):
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ConfigError(f"pretrain.translation.average_last_epochs = {keep!r} must be an integer >= 1")
        self.model_dir, self.config, self.keep = Path(model_dir), config, keep
        self.steps_per_epoch, self.total_steps = steps_per_epoch, total_steps
        self.final_epoch = math.ceil(total_steps / steps_per_epoch)
        self.first_epoch = max(1, self.final_epoch - keep + 1)
        if self.final_epoch < keep:
            log.warning("training ends in epoch %d: BLEU is averaged over %d checkpoint(s), not %d",
                        self.final_epoch, self.final_epoch, keep)

    def epoch_ends(self) -> list[tuple[int, int]]:
        """(epoch, step) of every kept checkpoint, oldest first; the last is the end of training."""
        ends = [(e, e * self.steps_per_epoch) for e in range(self.first_epoch, self.final_epoch)]
        return ends + [(self.final_epoch, self.total_steps)]

    def save(self, model: nn.Module, step: int) -> dict:
        """Write the weights if ``step`` ends one of the kept epochs before the last; the trainer
        records the returned dict in its history."""
        epoch, rest = divmod(step, self.steps_per_epoch)
        if rest or not self.first_epoch <= epoch < self.final_epoch:
            return {"epoch": epoch + (1 if rest else 0), "saved": 0}
        save_checkpoint(model, self.config, self.model_dir / EPOCHS_DIR / f"epoch-{epoch}",
                        extra={"epoch": epoch, "step": step})
        return {"epoch": epoch, "saved": 1}

    def write_manifest(self) -> Path:
        """EPOCHS.json, once the run's model is saved (the last checkpoint)."""
        checkpoints = [{"epoch": e, "step": s, "dir": "." if e == self.final_epoch else f"{EPOCHS_DIR}/epoch-{e}"}
                       for e, s in self.epoch_ends()]
        for c in checkpoints:
            if not (self.model_dir / c["dir"] / "model.safetensors").is_file():
                raise DataError(f"{self.model_dir / c['dir']}: the checkpoint of epoch {c['epoch']} (step "
                                f"{c['step']}) was not written; rerun the run's training")
        path = self.model_dir / EPOCHS_DIR / MANIFEST
        write_json(path, {"steps_per_epoch": self.steps_per_epoch, "keep": self.keep, "checkpoints": checkpoints})
        return path


def kept_checkpoints(model_dir: Path) -> list[dict]:
    """The run's checkpoints to score, oldest first: EPOCHS.json's, or the run's model alone."""
    path = Path(model_dir) / EPOCHS_DIR / MANIFEST
    if not path.is_file():
        return [{"epoch": None, "step": None, "dir": "."}]
    return json.loads(path.read_text(encoding="utf-8"))["checkpoints"]
