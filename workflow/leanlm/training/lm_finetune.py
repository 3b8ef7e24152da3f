"""Fine-tuning a pretrained decoder on a language-modelling benchmark's train split (Table 3.2).

Table 3.2 reports WikiText-103 and Penn Treebank perplexity "over five runs", which one zero-shot
evaluation of a pretrained model cannot have, so (DESIGN §8) each decoder is fine-tuned on the
benchmark's train split once per seed, with Table 3.12's fine-tuning settings and the causal-LM loss,
and its test perplexity is then measured with stride 256 (:mod:`leanlm.training.perplexity`).

The train split's rows are one token stream (the same joining as the test stream), cut into
non-overlapping windows of ``max_length`` tokens (the last, shorter one dropped); every window is one
training example, shuffled per epoch by the seed. Early stopping and the kept weights follow the
validation split's strided perplexity (lower is better), evaluated every ``eval_every`` steps (null:
once per epoch). The settings are ``finetune.lm.fine_tune``: epochs, batch_size, lr, schedule,
warmup_ratio, weight_decay, adam_betas, adam_eps, clip_norm, eval_every, early_stopping_patience and,
optionally, ``max_train_tokens`` (a cap on the train stream, for small profiles).
"""

from __future__ import annotations

import shutil

import torch
from torch import nn

from leanlm.errors import DataError
from leanlm.evaluation.perplexity import strided_perplexity
from leanlm.training.engine import Trainer
from leanlm.training.finetune import finetune_train_config
from leanlm.training.text_batches import example_indices, micro_batches_per_step


class WindowBatches:
    """``batch_at(step, micro)``: ``batch_size`` train windows from the seed's per-epoch shuffle; the
    labels are the inputs (the causal-LM head shifts them)."""

    def __init__(self, windows: torch.Tensor, batch_size: int, seed: int):
        self.windows, self.batch_size, self.seed = windows, batch_size, seed
        self.per_step = micro_batches_per_step(1)  # the fine-tuning engine runs one micro-batch per rank

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        rows = self.windows[example_indices(len(self.windows), self.seed, start, self.batch_size)]
        return {"input_ids": rows, "labels": rows.clone()}


def train_windows(token_ids: torch.Tensor, max_length: int, max_tokens: int | None = None) -> torch.Tensor:
    """(N, max_length) non-overlapping windows of the train stream (the first ``max_tokens`` tokens)."""
    if max_tokens is not None:
        token_ids = token_ids[:max_tokens]
    count = token_ids.numel() // max_length
    if count == 0:
        raise DataError(f"the train split tokenises to {token_ids.numel()} tokens, fewer than one window of "
                        f"{max_length}; rebuild the task set with more text or lower finetune.lm.max_length")
    return token_ids[: count * max_length].view(count, max_length)


def fine_tune_lm(model: nn.Module, train_ids: torch.Tensor, validation_ids: torch.Tensor, settings: dict,
                 *, task: str, run_id: str, seed: int, max_length: int, stride: int, eval_batch_size: int,
                 scratch) -> dict:
    """Fine-tune ``model`` in place (see the module docstring); returns the trainer's summary plus the
    number of train windows, the steps and the best validation metrics."""
    windows = train_windows(train_ids, max_length, settings.get("max_train_tokens"))
    train_config = finetune_train_config(settings, task, run_id, seed, len(windows))

    def evaluate(m: nn.Module) -> dict:
        result = strided_perplexity(m, validation_ids, max_length=max_length, stride=stride,
                                    batch_size=eval_batch_size)
        return {"perplexity": result["perplexity"]}

    trainer = Trainer(model, train_config, WindowBatches(windows, settings["batch_size"], seed), run_dir=scratch,
                      evaluate=evaluate, primary_metric="perplexity", higher_is_better=False)
    summary = trainer.fit()  # the best validation state is restored
    shutil.rmtree(scratch, ignore_errors=True)
    return {"train_windows": len(windows), "steps": train_config.total_steps,
            "warmup_steps": train_config.warmup_steps, "best_step": summary.get("best_step"),
            "validation_metrics": {"perplexity": summary.get("best_metric")}}
