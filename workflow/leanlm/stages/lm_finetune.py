"""Fine-tuning a pretrained decoder on a language-modelling benchmark's train split (Table 3.2).

Table 3.2 reports WikiText-103 and Penn Treebank perplexity "over five runs", which one zero-shot
evaluation of a pretrained model cannot have, so (DESIGN §8) each decoder is fine-tuned on the
benchmark's train split once per seed, with Table 3.12's fine-tuning settings and the causal-LM loss,
and its test perplexity is then measured with stride 256 (:mod:`leanlm.runners.lm`).

The train split's rows are one token stream (the test stream's joining, encoded a chunk of rows at a
time: WikiText-103's train split is 540 MB of text, too much for one ``encode`` call), cut into
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
from tokenizers import Tokenizer
from torch import nn

from leanlm.errors import DataError
from leanlm.evaluation.perplexity import strided_perplexity
from leanlm.training.engine import Trainer
from leanlm.stages.finetune import finetune_train_config
from leanlm.training.text_batches import example_indices, micro_batches_per_step


ROWS_PER_CHUNK = 2000  # rows joined and encoded together (encode_batch runs the chunks in parallel)
ROW_SEPARATOR = "\n\n"  # as the test stream (leanlm.runners.lm)


def untruncated(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer itself, or a private copy without truncation/padding (which would cut the stream)."""
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def train_stream_ids(tokenizer, rows: list[dict], max_tokens: int | None = None) -> torch.Tensor:
    """The train rows in ``idx`` order as one int32 token stream, chunk by chunk (no special tokens);
    stops once ``max_tokens`` are there."""

    plain = untruncated(tokenizer)
    ordered = sorted(rows, key=lambda r: r["idx"])
    texts = [ROW_SEPARATOR.join(r["text"] for r in ordered[i:i + ROWS_PER_CHUNK])
             for i in range(0, len(ordered), ROWS_PER_CHUNK)]
    pieces, count = [], 0
    for start in range(0, len(texts), 16):
        for encoding in plain.encode_batch(texts[start:start + 16], add_special_tokens=False):
            pieces.append(torch.tensor(encoding.ids, dtype=torch.int32))
            count += len(encoding.ids)
        if max_tokens is not None and count >= max_tokens:
            break
    stream = torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int32)
    return stream[:max_tokens] if max_tokens is not None else stream


class WindowBatches:
    """``batch_at(step, micro)``: ``batch_size`` train windows from the seed's per-epoch shuffle; the
    labels are the inputs (the causal-LM head shifts them)."""

    def __init__(self, windows: torch.Tensor, batch_size: int, seed: int):
        self.windows, self.batch_size, self.seed = windows, batch_size, seed
        self.per_step = micro_batches_per_step(1)  # the fine-tuning engine runs one micro-batch per rank

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        rows = self.windows[example_indices(len(self.windows), self.seed, start, self.batch_size)].long()
        return {"input_ids": rows, "labels": rows.clone()}


def train_windows(token_ids: torch.Tensor, max_length: int) -> torch.Tensor:
    """(N, max_length) non-overlapping windows of the train stream."""
    count = token_ids.numel() // max_length
    if count == 0:
        raise DataError(f"the train split tokenises to {token_ids.numel()} tokens, fewer than one window of "
                        f"{max_length}; rebuild the task set with more text or lower finetune.lm.max_length")
    return token_ids[: count * max_length].view(count, max_length)


def fine_tune_lm(model: nn.Module, train_rows: list[dict], validation_ids: torch.Tensor, settings: dict,
                 *, tokenizer, task: str, run_id: str, seed: int, max_length: int, stride: int,
                 eval_batch_size: int, scratch) -> dict:
    """Fine-tune ``model`` in place (see the module docstring); returns the trainer's summary plus the
    number of train windows, the steps and the best validation metrics."""
    windows = train_windows(train_stream_ids(tokenizer, train_rows, settings.get("max_train_tokens")), max_length)
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
