"""``leanlm pretrain``: pretrain one model of the experiment matrix (MLM for the ch. 3 encoder).

Reads the profile's corpus and tokenizer, packs the training documents into full-length sequences,
trains with the shared engine (checkpoints + resume after a kill), and writes

- ``models/<profile>/<run_id>/{model.safetensors,config.json}`` (loadable with one call), and
- ``results/<profile>/runs/<run_id>/pretrain.json`` (config, summary, validation MLM loss,
  parameter counts, timing, hardware).

Packing holds the token ids in memory (int32): fine for the packaged corpus and for a paper-scale
run on a GPU node with enough RAM (about 4 bytes per token).
"""

from __future__ import annotations

import logging
import math
import time

import torch

from leanlm import paths
from leanlm.config import get_run, public
from leanlm.data.tokenizer import load_tokenizer
from leanlm.errors import ConfigError, DataError
from leanlm.io import write_json
from leanlm.modeling.checkpoint import save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import embedding_parameters, model_attention_parameters, total_parameters
from leanlm.modeling.heads import BertForMLM
from leanlm.provenance import hardware
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.objectives import mlm_mask, pack_sequences
from leanlm.training.seeding import seed_everything, step_generator
from leanlm.training.text_batches import (
    example_indices,
    micro_batches_per_step,
    read_documents,
    tokenize_documents,
)

log = logging.getLogger(__name__)

PRETRAIN_SEED = 0  # one pretrained model per configuration, as in the thesis


class MLMBatches:
    """``batch_at(step, micro)`` for MLM over packed sequences (random access, see text_batches)."""

    def __init__(self, sequences: torch.Tensor, special_ids: list[int], mask_id: int, vocab_size: int,
                 batch_size: int, grad_accum: int, mask_prob: float, seed: int):
        self.sequences = sequences
        self.special = torch.tensor(sorted(special_ids), dtype=torch.long)
        self.mask_id, self.vocab_size, self.mask_prob = mask_id, vocab_size, mask_prob
        self.batch_size, self.seed = batch_size, seed
        self.per_step = micro_batches_per_step(grad_accum)

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        rows = self.sequences[example_indices(len(self.sequences), self.seed, start, self.batch_size)]
        return self.masked(rows, step_generator(self.seed, step, micro))

    def masked(self, rows: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        special_mask = torch.isin(rows, self.special)
        inputs, labels = mlm_mask(rows, special_mask, self.mask_id, self.vocab_size, self.mask_prob, generator)
        return {"input_ids": inputs, "attention_mask": torch.ones_like(rows), "labels": labels}


def _pack(tokenizer, path, seq_len: int, desc: str) -> torch.Tensor:
    docs = tokenize_documents(tokenizer, read_documents(path), desc=desc)
    packed = pack_sequences(docs, seq_len, tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"))
    if len(packed) == 0:
        raise DataError(f"{path}: no full sequence of {seq_len} tokens could be packed; the corpus is too small")
    return packed


@torch.no_grad()
def validation_loss(model, batches: MLMBatches, sequences: torch.Tensor, device, max_rows: int = 512) -> float:
    """Mean MLM loss on the validation split with fixed masks (comparable across runs of a profile)."""
    model.eval()
    total, count = 0.0, 0
    rows = sequences[:max_rows]
    generator = torch.Generator().manual_seed(12345)
    for start in range(0, len(rows), batches.batch_size):
        batch = batches.masked(rows[start : start + batches.batch_size], generator)
        batch = {k: v.to(device) for k, v in batch.items()}
        n = int((batch["labels"] != -100).sum())
        if n:
            total += float(model(**batch)["loss"]) * n
            count += n
    model.train()
    return total / max(count, 1)


def pretrain(config: dict, run_id: str) -> dict:
    run = get_run(config, run_id)
    profile = config["profile"]
    settings = config["pretrain"][run.objective]
    if run.objective != "mlm":
        raise ConfigError(f"{config['_params_file']}: objective {run.objective!r} has no pretraining runner yet")
    if settings["seq_len"] > run.model["max_position"]:
        raise ConfigError(
            f"{config['_params_file']}: pretrain.{run.objective}.seq_len = {settings['seq_len']} exceeds "
            f"models.{run.backbone}.max_position = {run.model['max_position']}"
        )
    seed_everything(PRETRAIN_SEED)
    started = time.time()
    tokenizer = load_tokenizer(profile)
    corpus = paths.data_dir(profile) / "corpus"
    train_seqs = _pack(tokenizer, corpus / "train.jsonl", settings["seq_len"], "tokenize train")
    valid_seqs = _pack(tokenizer, corpus / "validation.jsonl", settings["seq_len"], "tokenize validation")
    log.info("%s: %d training sequences of %d tokens", run_id, len(train_seqs), settings["seq_len"])

    model_config = ModelConfig.from_dict({**run.model, "vocab_size": tokenizer.get_vocab_size()})
    model = BertForMLM(model_config)
    special_ids = [tokenizer.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]")]
    batches = MLMBatches(
        train_seqs, special_ids, tokenizer.token_to_id("[MASK]"), tokenizer.get_vocab_size(),
        settings["batch_size"], settings["grad_accum"], settings["mask_prob"], PRETRAIN_SEED,
    )
    out_dir = paths.models_dir(profile) / run_id
    train_config = TrainConfig(
        total_steps=settings["steps"],
        lr=settings["lr"],
        schedule=settings["schedule"],
        warmup_steps=settings["warmup_steps"],
        weight_decay=settings["weight_decay"],
        adam_betas=tuple(settings["adam_betas"]),
        adam_eps=settings["adam_eps"],
        grad_accum=settings["grad_accum"],
        clip_norm=settings["clip_norm"],
        seed=PRETRAIN_SEED,
        checkpoint_every=settings["checkpoint_every"],
        desc=f"pretrain {run_id}",
    )
    trainer = Trainer(model, train_config, batches, run_dir=out_dir)
    summary = trainer.fit()
    device = next(model.parameters()).device
    val_loss = validation_loss(model, batches, valid_seqs, device)

    save_checkpoint(model, model_config, out_dir, extra={"run_id": run_id, "profile": profile})
    record = {
        "profile": profile,
        "experiment": run.experiment,
        "run": run.name,
        "run_id": run_id,
        "objective": run.objective,
        "model": model_config.to_dict(),
        "pretrain": settings,
        "config": public(config),
        "summary": {k: v for k, v in summary.items() if k != "history"},
        "history": summary.get("history", []),
        "validation": {"mlm_loss": val_loss, "mlm_perplexity": math.exp(min(val_loss, 50.0))},
        "data": {"train_sequences": len(train_seqs), "validation_sequences": len(valid_seqs)},
        "parameters": {
            "total": total_parameters(model),
            "attention": model_attention_parameters(model),
            "embedding": embedding_parameters(model),
        },
        "timing": {"seconds": time.time() - started},
        "hardware": hardware(),
    }
    write_json(paths.results_dir(profile) / "runs" / run_id / "pretrain.json", record)
    trainer.remove_checkpoint()
    log.info("%s: final loss %.4f, validation MLM loss %.4f", run_id, summary["final_loss"], val_loss)
    return record
