"""Fine-tuning runner for ``multiple_choice`` tasks (COPA): one (context, choice) pair per choice.

Rows are ``{idx, text_a, text_b (question or None), choices, label}``. The context segment is
``text_a`` followed by ``text_b`` (COPA: the premise, then "What was the cause of this?" or "What
happened as a result?"), the second segment is the choice, so each example becomes C encoded pairs
that :func:`collate_choices` pads into (B, C, L) tensors for :class:`BertForMultipleChoice`.
Everything else (schedule, early stopping on the dev split, seeds, the result record) is the
classification runner's, with the shared engine and the profile's ``finetune.<family>`` block.
"""

from __future__ import annotations

import shutil
import time

import torch

from leanlm import paths
from leanlm.data.tokenizer import special_token_id
from leanlm.data.tasks import get_task
from leanlm.evaluation import per_example
from leanlm.evaluation.metrics import compute_all
from leanlm.modeling.checkpoint import load_model
from leanlm.training.engine import Trainer
from leanlm.stages.finetune import (TaskBatches, TaskRunner, _load_split, finetune_train_config,
                                      held_out_metrics, task_record)
from leanlm.training.seeding import seed_everything
from leanlm.training.text_batches import collate, encode_examples, example_indices, padded_dims

Encoded = list[tuple[list[int], list[int]]]  # one (input_ids, token_type_ids) per choice


def context_of(row: dict) -> str:
    """The first segment: the text, then the question when the task has one."""
    return row["text_a"] if not row.get("text_b") else f"{row['text_a']} {row['text_b']}"


def encode_choices(tokenizer, rows: list[dict], max_len: int) -> list[Encoded]:
    """Per row, the encoded ``[CLS] context [SEP] choice [SEP]`` of each of its choices."""
    pairs = [{"text_a": context_of(row), "text_b": choice} for row in rows for choice in row["choices"]]
    flat = encode_examples(tokenizer, pairs, max_len)  # one tokenizer call for all choices
    out, at = [], 0
    for row in rows:
        out.append(flat[at : at + len(row["choices"])])
        at += len(row["choices"])
    return out


def collate_choices(examples: list[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad B examples of C choices each to (B, C, L) (L: the longest pair of the batch)."""
    choices = len(examples[0])
    if any(len(e) != choices for e in examples):
        raise ValueError("every example of a batch needs the same number of choices")
    flat = collate([pair for example in examples for pair in example], pad_id)
    return {k: v.view(len(examples), choices, -1) for k, v in flat.items()}


class ChoiceBatches(TaskBatches):
    """The classification runner's seeded batches, collated as (B, C, L)."""

    def __init__(self, encoded: list[Encoded], labels: list[int], batch_size: int, seed: int, pad_id: int):
        super().__init__(encoded, labels, batch_size, 1, seed, pad_id, regression=False)

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        idx = example_indices(len(self.encoded), self.seed, start, self.batch_size).tolist()
        batch = collate_choices([self.encoded[i] for i in idx], self.pad_id)
        batch["labels"] = self.labels[idx]
        return batch

    def varying_dims(self, batch: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
        return padded_dims(batch, length_dim=2)  # (B, C, L): the padded length is the last dimension


@torch.no_grad()
def predict_choices(model, encoded: list[Encoded], pad_id: int, batch_size: int = 32) -> list[int]:
    """The index of the highest-scoring choice of every example."""
    model.eval()
    device = next(model.parameters()).device
    preds: list[int] = []
    for start in range(0, len(encoded), batch_size):
        batch = {k: v.to(device) for k, v in collate_choices(encoded[start : start + batch_size], pad_id).items()}
        preds.extend(model(**batch)["logits"].float().argmax(-1).tolist())
    model.train()
    return preds


class MultipleChoiceRunner(TaskRunner):
    """Fine-tunes a pretrained encoder as BertForMultipleChoice on one task with one seed."""

    def __call__(self, config, run_id, family, task, seed, tokenizer) -> dict:
        profile, settings = config["profile"], config["finetune"][family]
        spec = get_task(task)
        pad_id = special_token_id(tokenizer, "pad")  # [PAD], or RoBERTa's <pad>
        rows = {split: _load_split(profile, task, split) for split in ("train", "validation", "test")}
        encoded = {split: encode_choices(tokenizer, r, settings["max_seq_len"]) for split, r in rows.items()}
        labels = {split: [r["label"] for r in split_rows] for split, split_rows in rows.items()}

        seed_everything(seed)
        model = load_model(paths.models_dir(profile) / run_id, kind="multiple_choice")
        train_config = finetune_train_config(settings, task, run_id, seed, len(rows["train"]))

        def evaluate(m, split: str = "validation") -> dict:
            return compute_all(spec.metrics, predict_choices(m, encoded[split], pad_id), labels[split])

        scratch = paths.models_dir(profile) / run_id / "finetune" / f"{task}-seed{seed}"
        trainer = Trainer(
            model,
            train_config,
            ChoiceBatches(encoded["train"], labels["train"], settings["batch_size"], seed, pad_id),
            run_dir=scratch,
            evaluate=evaluate,
            primary_metric=spec.primary_metric,
            higher_is_better=True,
        )
        started = time.time()
        summary = trainer.fit()
        dev_preds = predict_choices(model, encoded["validation"], pad_id)  # the engine restored the best state
        metrics = compute_all(spec.metrics, dev_preds, labels["validation"])
        test_metrics = held_out_metrics(rows["test"], lambda: evaluate(model, "test"))
        shutil.rmtree(scratch, ignore_errors=True)
        return task_record(task, seed, spec, metrics, test_metrics, summary, train_config,
                           len(rows["train"]), len(rows["validation"]), started,
                           # The final dev choices, per example: what a claim's paired bootstrap resamples.
                           per_example=per_example.classification(dev_preds, labels["validation"], spec.metrics))


Runner = MultipleChoiceRunner
