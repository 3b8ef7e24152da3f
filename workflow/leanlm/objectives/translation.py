"""Training the encoder-decoder on WMT-14 en-de from scratch, and scoring it with BLEU (§3.4.4).

Two entry points, both found by the pipeline's registries:

- the pretraining objective ``translation`` (``leanlm pretrain`` of a ``ch3`` translation run): train a
  BPE tokenizer shared by source and target on the task's train split ("byte-pair-encoding with 37K
  merging steps on the training set ... source language and target language share the vocabulary"),
  save it as ``models/<profile>/<run_id>/tokenizer.json``, train the Vaswani model with label-smoothed
  cross-entropy, and save it like every pretrained model (model.safetensors + config.json, and
  ``results/<profile>/runs/<run_id>/pretrain.json``);
- the task runner for input shape ``seq2seq`` (``leanlm finetune <run> translation``): load that model
  and its tokenizer, translate the test split (newstest2014 on the hub) with beam search and report
  corpus BLEU. It trains nothing, so it does not depend on the seed (``seeded = False``).

The thesis trains one seed and reports "the average on the last five epochs": training keeps the
weights at the end of each of the last ``average_last_epochs`` epochs (the last being the run's model;
:mod:`leanlm.training.epoch_checkpoints`), and the runner reports the mean BLEU over them, with each
checkpoint's BLEU under ``checkpoints`` in the results JSON.

Settings: ``pretrain.translation`` (steps, batch_size, grad_accum, seq_len: the longest source or
target in tokens, longer training pairs are skipped; vocab_size; label_smoothing; lr, schedule, ...;
validation_rows; average_last_epochs) and ``finetune.translation`` (tasks, beam_size, length_penalty, max_length,
batch_size, max_examples).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np
import torch
from tokenizers import Tokenizer

from leanlm import paths
from leanlm.data.tasks import get_task
from leanlm.errors import ConfigError, DataError
from leanlm.evaluation import per_example
from leanlm.evaluation.bleu import corpus_bleu, sentence_statistics
from leanlm.evaluation.metrics import compute_all
from leanlm.io import read_jsonl
from leanlm.modeling.checkpoint import load_model, save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.modeling.seq2seq import EOS_ID, PAD_ID, UNK_ID
from leanlm.provenance import hardware
from leanlm.runs import pretrain_settings
from leanlm.training import checkpointing
from leanlm.training.engine import Trainer
from leanlm.training.epoch_checkpoints import LastEpochCheckpoints, kept_checkpoints
from leanlm.stages.finetune import TaskRunner
from leanlm.stages.pretrain import (PretrainObjective, parameter_counts,
                                      pretrain_train_config, record_head, record_path,
                                      write_model_and_record)
from leanlm.training.seeding import seed_everything
from leanlm.training.text_batches import micro_batches_per_step
from leanlm.training.translation_pairs import (TOKENIZER_FILE, TranslationBatches, collate_pairs, decode_ids,
                                               encode_pairs, encode_texts, load_bpe, save_bpe, train_bpe,
                                               validation_loss)

log = logging.getLogger(__name__)

def translation_task(config: dict, run) -> str:
    """The seq2seq task the run is trained on: the first one of its fine-tuning families."""
    for family in run.finetune:
        for task in config["finetune"].get(family, {}).get("tasks", []):
            if get_task(task).input_shape == "seq2seq":
                return task
    raise ConfigError(f"{config['_params_file']}: run {run.run_id} trains with objective 'translation' but "
                      f"none of its families ({', '.join(run.finetune)}) lists a seq2seq task; add e.g. "
                      f"finetune.translation.tasks: [wmt14] and finetune: [translation] to its experiment")


def _task_rows(profile: str, task: str, split: str) -> list[dict]:
    path = paths.data_dir(profile) / "tasks" / task / f"{split}.jsonl"
    if not path.is_file():
        raise DataError(f"task file {path} is missing; run the data stage (`leanlm data tasks --params "
                        f"params/{profile}.yaml`)")
    rows = read_jsonl(path)
    if not rows:
        raise DataError(f"task file {path} is empty")
    return rows


class TranslationObjective(PretrainObjective):
    head = "seq2seq"
    metric = "translation"

    def run(self, config: dict, run) -> dict:
        return train_translation(config, run, keep_checkpoint=self.keep_checkpoint)


def train_translation(config: dict, run, keep_checkpoint: bool = False) -> dict:
    """Train the run's encoder-decoder from scratch; see the module docstring for what is written.
    ``keep_checkpoint``: leave the final training checkpoint (PretrainObjective.keep_checkpoint)."""
    run_id, profile = run.run_id, config["profile"]
    settings = pretrain_settings(config, run)  # the size's overrides included (BIG: 300K steps)
    where = f"{config['_params_file']}: pretrain.translation"
    if "vocab_size" not in settings:
        raise ConfigError(f"{where}.vocab_size is missing (the shared BPE vocabulary size; the thesis: 37000)")
    if settings["seq_len"] > run.model["max_position"]:
        raise ConfigError(f"{where}.seq_len = {settings['seq_len']} exceeds models.{run.backbone}.max_position = "
                          f"{run.model['max_position']} (sinusoidal positions are tabulated up to max_position)")
    seed_everything(run.pretrain_seed)  # PRETRAIN_SEED, or a further pretraining replica's own
    started = time.time()
    task = translation_task(config, run)
    train_rows = _task_rows(profile, task, "train")
    valid_rows = _task_rows(profile, task, "validation")[: settings.get("validation_rows", 512)]

    out_dir = paths.models_dir(profile) / run_id
    resuming = (checkpointing.checkpoint_dir(out_dir) / checkpointing.STATE_FILE).is_file()
    if resuming and (out_dir / TOKENIZER_FILE).is_file():
        tokenizer = load_bpe(out_dir)  # the one the checkpointed model was trained with
    else:
        texts = lambda: (text for row in train_rows for text in (row["source"], row["target"]))  # noqa: E731
        tokenizer = train_bpe(texts, settings["vocab_size"])
        save_bpe(tokenizer, out_dir)
    train_pairs, skipped = encode_pairs(tokenizer, train_rows, settings["seq_len"])
    valid_pairs, _ = encode_pairs(tokenizer, valid_rows, settings["seq_len"])
    if len(train_pairs) == 0:
        raise DataError(f"{task}: no training pair fits seq_len={settings['seq_len']} tokens per side")
    log.info("%s: %d training pairs (%d longer than %d tokens skipped), vocabulary %d", run_id,
             len(train_pairs), skipped, settings["seq_len"], tokenizer.get_vocab_size())

    model_config = ModelConfig.from_dict({**run.model, "vocab_size": tokenizer.get_vocab_size(),
                                          "pad_token_id": PAD_ID}, where=f"run {run_id}: model")
    model = build_model(model_config, "seq2seq", label_smoothing=settings.get("label_smoothing", 0.1))
    batches = TranslationBatches(train_pairs, settings["batch_size"], settings["grad_accum"], run.pretrain_seed)
    # One epoch is one pass over the training pairs; the trainer's evaluate hook runs at every epoch end
    # and keeps the weights of the last epochs (BLEU is averaged over them).
    steps_per_epoch = math.ceil(len(train_pairs) / (settings["batch_size"] * micro_batches_per_step(settings["grad_accum"])))
    train_config = dataclasses.replace(pretrain_train_config(settings, f"train {run_id}", run.pretrain_seed), eval_every=steps_per_epoch)
    epochs = LastEpochCheckpoints(out_dir, model_config, settings.get("average_last_epochs", 1), steps_per_epoch,
                                  train_config.total_steps)
    trainer = Trainer(model, train_config, batches, run_dir=out_dir,
                      evaluate=lambda m: epochs.save(m, trainer.state.step))
    summary = trainer.fit()
    val_loss = validation_loss(model, valid_pairs, settings["batch_size"]) if len(valid_pairs) else float("nan")

    record = {
        **record_head(config, run, model_config.to_dict(), settings, task=task),
        "summary": {k: v for k, v in summary.items() if k != "history"},
        "history": summary.get("history", []),
        "validation": {"translation_loss": val_loss, "translation_perplexity": math.exp(min(val_loss, 50.0))},
        "data": {"train_pairs": len(train_pairs), "train_pairs_skipped": skipped,
                 "validation_pairs": len(valid_pairs), "steps_per_epoch": steps_per_epoch},
        "averaged_checkpoints": [{"epoch": e, "step": s} for e, s in epochs.epoch_ends()],
        "tokenizer": {"kind": "bpe", "vocab_size": tokenizer.get_vocab_size(), "file": TOKENIZER_FILE},
        "parameters": parameter_counts(model),
        "timing": {"seconds": time.time() - started},
        "hardware": hardware(),
    }
    def write_model():  # the final model is the last averaged checkpoint: EPOCHS.json follows it
        save_checkpoint(model, model_config, out_dir, extra={"run_id": run_id, "profile": profile, "task": task})
        epochs.write_manifest()

    write_model_and_record(record_path(profile, run_id), record, write_model)
    if not keep_checkpoint:
        trainer.remove_checkpoint()
    log.info("%s: final loss %.4f, validation loss %.4f", run_id, summary["final_loss"], val_loss)
    return record


# ------------------------------------------------------------------------------------- evaluation
def translate(model, tokenizer: Tokenizer, sources: list[str], batch_size: int, beam_size: int,
              length_penalty: float, max_length: int, device: torch.device | None = None) -> list[str]:
    """Translate ``sources`` in batches of similar length (less padding), returned in input order."""
    device = device or next(model.parameters()).device
    max_length = min(max_length, model.config.max_position)
    encoded = [ids[: model.config.max_position - 1] + [EOS_ID] for ids in encode_texts(tokenizer, sources)]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out: list[str] = [""] * len(sources)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = collate_pairs([(encoded[i], [UNK_ID]) for i in chunk])
        with autocast:
            generated = model.generate(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                                       max_length=max_length, beam_size=beam_size, length_penalty=length_penalty)
        for i, text in zip(chunk, decode_ids(tokenizer, generated)):
            out[i] = text
    return out


class TranslationRunner(TaskRunner):
    """BLEU of the trained translation model on the task's test split (beam search): the mean over the
    kept checkpoints of the last epochs, each checkpoint's scores under ``checkpoints``."""

    seeded = False

    def __call__(self, config: dict, run_id: str, family: str, task: str, seed: int, tokenizer=None) -> dict:
        # ``tokenizer`` is the profile's WordPiece; translation models carry their own BPE.
        profile, settings = config["profile"], config["finetune"][family]
        spec = get_task(task)
        model_dir = paths.models_dir(profile) / run_id
        bpe = load_bpe(model_dir)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        rows = _task_rows(profile, task, "test")[: settings.get("max_examples") or None]
        references = [r["target"] for r in rows]
        started = time.time()
        checkpoints = []
        for kept in kept_checkpoints(model_dir):
            model = load_model(model_dir / kept["dir"], kind="seq2seq").to(device).eval()
            hypotheses = translate(model, bpe, [r["source"] for r in rows], settings["batch_size"],
                                   settings["beam_size"], settings.get("length_penalty", 0.6),
                                   settings["max_length"], device)
            checkpoints.append({**kept, **compute_all(spec.metrics, hypotheses, references)})
            log.info("%s %s epoch %s (step %s): %s", run_id, task, kept["epoch"], kept["step"],
                     ", ".join(f"{m} {checkpoints[-1][m]:.4f}" for m in spec.metrics))
        metrics = {m: float(np.mean([c[m] for c in checkpoints])) for m in spec.metrics}
        _, signature = corpus_bleu(hypotheses, references)  # the last checkpoint's; the same signature for all
        return {
            "task": task,
            "seed": seed,
            "split": "test",
            "metrics": metrics,
            "primary_metric": spec.primary_metric,
            "primary": metrics[spec.primary_metric],
            "averaged_checkpoints": len(checkpoints),
            "checkpoints": checkpoints,
            "bleu_signature": signature,
            # Per-sentence BLEU statistics: a claim's paired bootstrap resamples sentences.
            "per_example": per_example.scores(sentence_statistics(hypotheses, references),
                                              {"bleu": ["bleu", {}]} if "bleu" in spec.metrics else {}),
            "test_examples": len(rows),
            "examples": [{"source": r["source"], "reference": r["target"], "hypothesis": h}
                         for r, h in list(zip(rows, hypotheses))[:5]],
            "decoding": {"beam_size": settings["beam_size"], "length_penalty": settings.get("length_penalty", 0.6),
                         "max_length": settings["max_length"], "kv_cache": True},
            "seconds": time.time() - started,
        }


Objective = TranslationObjective  # the seq2seq fine-tuning runner, leanlm.runners.seq2seq, is TranslationRunner
