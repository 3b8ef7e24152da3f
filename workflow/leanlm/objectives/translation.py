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
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from leanlm import paths
from leanlm.data.tasks import get_task
from leanlm.errors import ConfigError, DataError
from leanlm.evaluation import per_example
from leanlm.evaluation.bleu import corpus_bleu, sentence_statistics
from leanlm.evaluation.metrics import compute_all
from leanlm.io import atomic_path, read_jsonl
from leanlm.modeling.checkpoint import load_model, save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.modeling.seq2seq import BOS_ID, EOS_ID, IGNORE_INDEX, PAD_ID, UNK_ID
from leanlm.provenance import hardware
from leanlm.runs import pretrain_settings
from leanlm.training import checkpointing
from leanlm.training.engine import Trainer
from leanlm.training.epoch_checkpoints import LastEpochCheckpoints, kept_checkpoints
from leanlm.stages.finetune import TaskRunner
from leanlm.stages.pretrain import (PRETRAIN_SEED, PretrainObjective, parameter_counts,
                                      pretrain_train_config, record_head, record_path,
                                      write_model_and_record)
from leanlm.training.seeding import seed_everything
from leanlm.training.text_batches import example_indices, micro_batches_per_step

log = logging.getLogger(__name__)

# Ids fixed by their order (the model's PAD_ID, UNK_ID, BOS_ID, EOS_ID).
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
assert [SPECIAL_TOKENS.index(t) for t in SPECIAL_TOKENS] == [PAD_ID, UNK_ID, BOS_ID, EOS_ID]
TOKENIZER_FILE = "tokenizer.json"
MAX_ALPHABET = 1000  # characters kept as BPE symbols; rarer ones become <unk>


# ------------------------------------------------------------------------------------- tokenizer
def _bpe_tokenizer(model: models.BPE) -> Tokenizer:
    # Metaspace marks word starts with "▁", so decoding restores the exact spacing: sacrebleu scores
    # detokenized text, and German punctuation/compounds survive the round trip.
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tokenizer


def train_bpe(texts: Callable[[], Iterable[str]], vocab_size: int) -> Tokenizer:
    """A BPE tokenizer of ``vocab_size`` entries trained on the texts ``texts()`` yields (read twice).

    Deterministic: the alphabet (the most frequent characters, ties by code point) is given to the
    trainer up front, so no tie between equally rare characters is decided by hash order; merges are
    then chosen by count with ties broken by symbol ids, which are fixed.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 16:
        raise ConfigError(f"pretrain.translation.vocab_size={vocab_size} is too small for a BPE vocabulary")
    scratch = _bpe_tokenizer(models.BPE(unk_token="<unk>"))
    counts: Counter[str] = Counter()
    for text in texts():
        counts.update(scratch.normalizer.normalize_str(text))
    for char in [c for c in counts if c.isspace()]:
        del counts[char]
    alphabet = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_ALPHABET]]
    alphabet.append("▁")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, limit_alphabet=len(alphabet), show_progress=False)
    scratch.train_from_iterator(texts(), trainer=trainer)
    return scratch


def save_bpe(tokenizer: Tokenizer, directory: Path) -> Path:
    path = Path(directory) / TOKENIZER_FILE
    with atomic_path(path, suffix=".json") as tmp:
        tokenizer.save(str(tmp))
    return path


def load_bpe(directory: Path) -> Tokenizer:
    path = Path(directory) / TOKENIZER_FILE
    if not path.is_file():
        raise DataError(f"{path} is missing: the translation model's tokenizer is saved beside it by "
                        f"`leanlm pretrain` (objective translation); run that first")
    tokenizer = Tokenizer.from_file(str(path))
    for index, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != index:
            raise DataError(f"{path}: {token} has id {tokenizer.token_to_id(token)}, not {index}; it is not a "
                            f"translation tokenizer of this pipeline")
    return tokenizer


def encode_texts(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [enc.ids for enc in tokenizer.encode_batch(texts, add_special_tokens=False)]


def decode_ids(tokenizer: Tokenizer, rows: torch.Tensor) -> list[str]:
    """Generated ids (B, L) -> text: cut at the first </s>, specials dropped."""
    out = []
    for ids in rows.tolist():
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        out.append(tokenizer.decode([i for i in ids if i > EOS_ID], skip_special_tokens=True).strip())
    return out


# ------------------------------------------------------------------------------------- batches
Pair = tuple[Sequence[int], Sequence[int]]  # (source ids + </s>, target ids)
ENCODE_CHUNK = 65536  # texts per encode_batch call: bounded memory at WMT scale (4.5M pairs)


class PairStore:
    """Encoded sentence pairs in flat int32 arrays with offsets: indexable like a list of pairs.

    A Python list of lists would cost ~50 bytes per token; WMT-14's 4.5M pairs hold ~280M tokens.
    """

    def __init__(self, sources: np.ndarray, source_offsets: np.ndarray, targets: np.ndarray,
                 target_offsets: np.ndarray):
        self.sources, self.source_offsets = sources, source_offsets
        self.targets, self.target_offsets = targets, target_offsets

    def __len__(self) -> int:
        return len(self.source_offsets) - 1

    def __getitem__(self, i: int) -> Pair:
        so, to = self.source_offsets, self.target_offsets
        return self.sources[so[i] : so[i + 1]], self.targets[to[i] : to[i + 1]]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _flat(chunks: list[list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    parts = [a for chunk in chunks for a in chunk]
    lengths = np.fromiter((len(a) for a in parts), dtype=np.int64, count=len(parts))
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)
    return flat, offsets


def encode_pairs(tokenizer: Tokenizer, rows: list[dict], max_tokens: int) -> tuple[PairStore, int]:
    """(source + </s>, target) ids of each row; pairs with a side over ``max_tokens`` (</s> or <s>
    included) are skipped: truncating would teach translations that stop mid-sentence.
    Returns (pairs, number skipped)."""
    sources: list[list[np.ndarray]] = []
    targets: list[list[np.ndarray]] = []
    skipped = 0
    eos = np.array([EOS_ID], dtype=np.int32)
    for start in range(0, len(rows), ENCODE_CHUNK):
        chunk = rows[start : start + ENCODE_CHUNK]
        src_ids = encode_texts(tokenizer, [r["source"] for r in chunk])
        tgt_ids = encode_texts(tokenizer, [r["target"] for r in chunk])
        kept_src, kept_tgt = [], []
        for src, tgt in zip(src_ids, tgt_ids):
            if not src or not tgt or len(src) + 1 > max_tokens or len(tgt) + 1 > max_tokens:
                skipped += 1
                continue
            kept_src.append(np.concatenate([np.asarray(src, dtype=np.int32), eos]))
            kept_tgt.append(np.asarray(tgt, dtype=np.int32))
        sources.append(kept_src)
        targets.append(kept_tgt)
    return PairStore(*_flat(sources), *_flat(targets)), skipped


def collate_pairs(pairs: list[Pair], pad_id: int = PAD_ID) -> dict[str, torch.Tensor]:
    """Padded batch: input_ids/attention_mask (source), decoder_input_ids (<s> + target) and labels
    (target + </s>, -100 on padding)."""
    src_len = max(len(s) for s, _ in pairs)
    tgt_len = max(len(t) for _, t in pairs) + 1
    input_ids = np.full((len(pairs), src_len), pad_id, dtype=np.int64)
    mask = np.zeros((len(pairs), src_len), dtype=np.int64)
    decoder_input_ids = np.full((len(pairs), tgt_len), pad_id, dtype=np.int64)
    labels = np.full((len(pairs), tgt_len), IGNORE_INDEX, dtype=np.int64)
    for row, (src, tgt) in enumerate(pairs):
        input_ids[row, : len(src)] = src
        mask[row, : len(src)] = 1
        decoder_input_ids[row, 0] = BOS_ID
        decoder_input_ids[row, 1 : len(tgt) + 1] = tgt
        labels[row, : len(tgt)] = tgt
        labels[row, len(tgt)] = EOS_ID
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
            "decoder_input_ids": torch.from_numpy(decoder_input_ids), "labels": torch.from_numpy(labels)}


class TranslationBatches:
    """``batch_at(step, micro)``: sentence pairs from per-epoch seeded shuffles (random access, so a
    resumed run sees exactly the batches the killed one would have)."""

    def __init__(self, pairs: PairStore | list[Pair], batch_size: int, grad_accum: int, seed: int):
        self.pairs, self.batch_size, self.seed = pairs, batch_size, seed
        self.per_step = micro_batches_per_step(grad_accum)

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        idx = example_indices(len(self.pairs), self.seed, start, self.batch_size).tolist()
        return collate_pairs([self.pairs[i] for i in idx])


@torch.no_grad()
def validation_loss(model, pairs: PairStore | list[Pair], batch_size: int) -> float:
    """Mean cross-entropy per target token (no label smoothing), </s> included."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = [pairs[i] for i in range(start, min(start + batch_size, len(pairs)))]
        batch = {k: v.to(device) for k, v in collate_pairs(chunk).items()}
        labels = batch.pop("labels")
        logits = model(**batch)["logits"].float()
        total += float(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                       reduction="sum"))
        count += int((labels != IGNORE_INDEX).sum())
    model.train()
    return total / max(count, 1)


# ------------------------------------------------------------------------------------- objective
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
    seed_everything(PRETRAIN_SEED)
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
    batches = TranslationBatches(train_pairs, settings["batch_size"], settings["grad_accum"], PRETRAIN_SEED)
    # One epoch is one pass over the training pairs; the trainer's evaluate hook runs at every epoch end
    # and keeps the weights of the last epochs (BLEU is averaged over them).
    steps_per_epoch = math.ceil(len(train_pairs) / (settings["batch_size"] * micro_batches_per_step(settings["grad_accum"])))
    train_config = dataclasses.replace(pretrain_train_config(settings, f"train {run_id}"), eval_every=steps_per_epoch)
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
