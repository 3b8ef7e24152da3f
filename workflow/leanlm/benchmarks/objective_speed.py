"""``leanlm bench --speed``: ch. 2's pretraining time per sample, BERT-MLM against BERT-S+R and the
HashFormers (Table 2.3's PT columns; the claims of §2.5.3), one job of the pipeline (rule
``pretraining_speed``, results/<profile>/speed/ch2_hashformers.json).

What is timed: one training step of each pretrained run of ``ch2_hashformers`` at the profile's model size
and vocabulary, with its objective's head (S+R's ``pretrain.shuffle_random.head`` included): forward, loss,
backward, gradient clipping, AdamW, on batches built beforehand from random
token ids with the run's own corruption (MLM's masking, Shuffle+Random's, a HashFormer's hash features
gathered from a codebook of pseudo-words), so the clock holds the objective and the model and nothing of
the host's batch building or the machine's other jobs. Every model steps on the same batch size and
sequence length (the profile's ``speed`` block, by default its S+R pretraining's), and the result is per
sample.

Protocol (as ``leanlm bench --parity``): every model is built once, then ``warmup_rounds`` untimed rounds
and ``rounds`` timed ones; in each round every model takes ``steps`` steps in turn, the order rotated from
round to round (so none always runs first, after another's cache or allocator state), and a drifting
machine load hits all of them alike. Each round gives each model one time per sample; the record keeps
them all (the claims' interval resamples rounds, paired across models) and their median. On a CPU the
clock is the process's CPU time (all threads), so waiting for a core on a shared machine does not count;
on CUDA it is wall time after a synchronize.

MLM's vocabulary head (``mlm_head``): ``all`` projects every position onto the vocabulary and takes the
cross-entropy over the masked ones, as ``transformers``' BertForMaskedLM / RobertaForMaskedLM compute it,
and so the thesis's models (the official HashFormers code trains those classes): the thesis's 2.1x
includes that work. ``labelled`` runs the projection at the masked positions only (~15% of tokens), as
this project's :class:`~leanlm.modeling.heads.BertForMLM` trains. Both give the same loss; at BERT-base
with 50,265 rows and 512 tokens the head is the largest matmul of the step, so the choice moves MLM/S+R
(docs/benchmarks.md).
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.benchmarks.hashing import pseudo_words
from leanlm.hashing.words import SPECIAL_TOKENS
from leanlm.budget import run_model_config
from leanlm.errors import ConfigError
from leanlm.hashing.codebook import HashCodebook
from leanlm.modeling.hash_features import embedding_features
from leanlm.modeling.lm_loss import IGNORE_INDEX
from leanlm.modeling.models import build_model
from leanlm.modeling.vocab import real_logits
from leanlm.plugins import OBJECTIVES
from leanlm.reporting.pretraining_speed import MLM_HEADS, speed_settings, speed_runs
from leanlm.runs import get_run, pretrain_settings
from leanlm.training.optimizer import adamw
from leanlm.training.precision import autocast_to

BASELINE = "ch2_hashformers-bert_mlm"  # Table 2.3's speed-ups are against BERT-MLM
CODEBOOK_WORDS = 4096  # distinct pseudo-words a HashFormer's rows are drawn from (hashing cost is untimed)


def mlm_loss_every_position(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """MLM's loss as transformers' BertForMaskedLM computes it: the vocabulary projection at every
    position, (B, L, V) logits, then the mean cross-entropy over the labelled positions (ignore_index)."""
    features = {k: v for k, v in batch.items() if k not in ("input_ids", "labels", "masked_positions")}
    sequence, _ = model.encoder(batch["input_ids"], None, None, **features)
    logits = real_logits(model.decoder(model.transform(sequence)), model.config.vocab_size)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1),
                           ignore_index=IGNORE_INDEX)


def mlm_loss_labelled(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """MLM's loss as this project trains it: the projection at the masked positions only."""
    return model(**batch, return_logits=False)["loss"]


def model_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(**batch)["loss"]


LOSSES: dict[str, Callable] = {"all": mlm_loss_every_position, "labelled": mlm_loss_labelled}


@dataclass
class Case:
    """One run, built once: its model, optimizer, batches (on the device) and loss."""

    run_id: str
    objective: str
    embedding: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batches: list[dict[str, torch.Tensor]]
    loss: Callable
    clip_norm: float
    times: list[float] = field(default_factory=list)  # seconds per round
    head_rows: int | None = None  # rows the output head projected in one step (counted on the first)


def _codebook(model_config) -> tuple[HashCodebook, list[int]]:
    """A codebook of pseudo-words for a HashFormer (LSH fits its n-grams on them), and their row ids."""
    words = pseudo_words(CODEBOOK_WORDS)
    codebook = HashCodebook.for_model(model_config, token_counts=Counter(words))
    ids = codebook.encode([" ".join(words)])[0]
    return codebook, ids


class IdsOnly:
    """The two things an objective's batch builder asks of a tokenizer: the special tokens' ids (0-4, BERT's
    names in a codebook's order: [PAD] [UNK] [CLS] [SEP] [MASK]) and the vocabulary's size."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def token_to_id(self, token: str) -> int | None:
        return SPECIAL_TOKENS.index(token) if token in SPECIAL_TOKENS else None

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return self.vocab_size


def _batches(objective, model_config, settings: dict, speed: dict, generator: torch.Generator) -> list[dict]:
    """``speed['steps']`` batches of the run's ``objective`` (its own batch builder) from random token rows at
    the speed batch size, hash features added."""
    n, seq_len, batch_size = speed["steps"], speed["seq_len"], speed["batch_size"]
    names = embedding_features(model_config)
    special = len(SPECIAL_TOKENS)
    if names:
        codebook, ids = _codebook(model_config)
        vocab = len(codebook)
        rows = torch.tensor(ids)[torch.randint(len(ids), (n * batch_size, seq_len), generator=generator)]
    else:
        vocab = model_config.vocab_size
        rows = torch.randint(special, vocab, (n * batch_size, seq_len), generator=generator)
    rows[:, 0], rows[:, -1] = SPECIAL_TOKENS.index("[CLS]"), SPECIAL_TOKENS.index("[SEP]")  # as packed rows are
    source = objective.batches({**settings, "batch_size": batch_size, "grad_accum": 1}, IdsOnly(vocab), rows, 0)
    out = []
    for step in range(n):
        batch = source(step, 0)
        if names:
            batch.update(codebook.features(batch["input_ids"], names, dict(model_config.embedding_options)))
        out.append(batch)
    return out


def build_case(config: dict, run_id: str, speed: dict, device: torch.device, seed: int = 0) -> Case:
    """The run's model (its profile's size and vocabulary), AdamW with its settings, and its batches."""
    run = get_run(config, run_id)
    settings = pretrain_settings(config, run)
    model_config = run_model_config(config, run, settings)
    if speed["seq_len"] > model_config.max_position:
        raise ConfigError(f"{config.get('_params_file')}: speed.seq_len={speed['seq_len']} exceeds run {run_id}'s "
                          f"{model_config.max_position} positions")
    objective = OBJECTIVES.get(run.objective)()  # the run's objective (leanlm.plugins): batches and head
    generator = torch.Generator().manual_seed(seed)
    batches = [{k: v.to(device) for k, v in b.items()}
               for b in _batches(objective, model_config, settings, speed, generator)]
    torch.manual_seed(seed)
    with torch.device(device):
        model = build_model(model_config, objective.head, **objective.head_options(settings))
    model.train()
    optimizer = adamw(model, SimpleNamespace(lr=settings["lr"], adam_betas=tuple(settings.get("adam_betas", (0.9, 0.999))),
                                             adam_eps=settings.get("adam_eps", 1e-8),
                                             weight_decay=settings.get("weight_decay", 0.0)),
                      fused=device.type == "cuda")
    loss = LOSSES[speed["mlm_head"]] if run.objective == "mlm" else model_loss
    return Case(run_id, run.objective, model_config.embedding, model, optimizer, batches, loss,
                float(settings.get("clip_norm", 1.0)))


def _output_head(case: Case) -> nn.Module:
    """The head's transform (dense, GELU, LayerNorm): it runs on exactly the rows the output projection
    gets (MLM's vocabulary, S+R's 3 classes), and is a module call in both MLM heads (the masked-positions
    head hands the vocabulary matrix to a chunked loss instead of calling the decoder)."""
    return case.model.transform


def _step(case: Case, batch: dict, device: torch.device, dtype: torch.dtype | None) -> None:
    with autocast_to(dtype, device):
        loss = case.loss(case.model, batch)
    loss.backward()
    nn.utils.clip_grad_norm_(case.model.parameters(), case.clip_norm)
    case.optimizer.step()
    case.optimizer.zero_grad(set_to_none=True)


def _count_head_rows(case: Case, batch: dict, device, dtype) -> None:
    """One step with a hook on the output head: how many rows it projects (the head's work)."""
    rows: list[int] = []
    hook = _output_head(case).register_forward_hook(lambda m, args, out: rows.append(args[0].reshape(-1, args[0].size(-1)).size(0)))
    try:
        _step(case, batch, device, dtype)
    finally:
        hook.remove()
    case.head_rows = sum(rows)


def order_of_round(names: list[str], round_: int) -> list[str]:
    """The models' order in round ``round_``: rotated by one each round."""
    k = round_ % len(names)
    return names[k:] + names[:k]


def run_rounds(cases: list[Case], speed: dict, device: torch.device, dtype: torch.dtype | None) -> list[list[str]]:
    """Warm-up rounds, then timed ones (module docstring); each case's ``times`` get one entry per timed
    round. Returns the order of each timed round."""
    by_id = {c.run_id: c for c in cases}
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    orders = []
    for c in cases:  # the head's work, counted on an untimed step that also warms the model up
        _count_head_rows(c, c.batches[0], device, dtype)
    for round_ in range(speed["warmup_rounds"] + speed["rounds"]):
        order = order_of_round([c.run_id for c in cases], round_)
        timed = round_ >= speed["warmup_rounds"]
        if timed:
            orders.append(order)
        for run_id in order:
            case = by_id[run_id]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = clock()
            for batch in case.batches:
                _step(case, batch, device, dtype)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if timed:
                case.times.append(clock() - start)
    return orders


def measure(config: dict, device: str = "auto", runs: list[str] | None = None) -> dict[str, Any]:
    """Time the profile's ch. 2 pretraining runs (module docstring); the record the readers check
    (:func:`leanlm.reporting.pretraining_speed.read_speed`)."""
    speed = speed_settings(config)
    run_ids = runs if runs is not None else speed_runs(config)
    if not run_ids:
        raise ConfigError(f"{config.get('_params_file')}: no pretrained run of ch2_hashformers to time")
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    dtype = torch.bfloat16 if dev.type == "cuda" else None
    cases = [build_case(config, run_id, speed, dev) for run_id in run_ids]
    orders = run_rounds(cases, speed, dev, dtype)
    samples = speed["steps"] * speed["batch_size"]
    ms = {c.run_id: [1000.0 * t / samples for t in c.times] for c in cases}
    medians = {run_id: statistics.median(times) for run_id, times in ms.items()}
    return {
        "profile": config["profile"],
        "settings": speed,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)",
        "dtype": "bf16" if dtype is not None else "fp32",
        "clock": "wall, CUDA synchronized" if dev.type == "cuda" else "process CPU time (all threads)",
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "runs": {c.run_id: {"objective": c.objective, "embedding": c.embedding, "samples_per_round": samples,
                            "head_rows_per_step": c.head_rows,
                            "mlm_head": speed["mlm_head"] if c.objective == "mlm" else None} for c in cases},
        "order": orders,
        "ms_per_sample": ms,
        "median_ms_per_sample": medians,
        "speedup_vs_baseline": ({r: medians[BASELINE] / m for r, m in medians.items()} if BASELINE in medians else None),
    }


def format_speed(record: dict[str, Any]) -> str:
    s = record["settings"]
    lines = [f"ch. 2 pretraining speed ({record['profile']}) on {record['device']}, {record['dtype']}: batch "
             f"{s['batch_size']} x {s['seq_len']}, {s['rounds']} rounds of {s['steps']} step(s) after "
             f"{s['warmup_rounds']} warm-up, MLM head over {'every position' if s['mlm_head'] == 'all' else 'masked positions'}"]
    ups = record.get("speedup_vs_baseline") or {}
    for run_id, median in record["median_ms_per_sample"].items():
        times = record["ms_per_sample"][run_id]
        up = f"  {ups[run_id]:.2f}x vs BERT-MLM" if run_id in ups else ""
        lines.append(f"  {run_id:34s} {median:9.3f} ms/sample (rounds {min(times):.3f}-{max(times):.3f}){up}")
    return "\n".join(lines)


__all__ = ["MLM_HEADS", "measure", "format_speed", "mlm_loss_every_position", "mlm_loss_labelled"]
