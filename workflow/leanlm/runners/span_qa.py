"""Fine-tuning and scoring span question answering (SQuAD v1.1 / v2.0; thesis §3.4, Table 3.12).

The recipe is BERT's (Devlin et al., 2019) as the Hugging Face ``run_qa`` example implements it:

- features: ``[CLS] question [SEP] context-window [SEP]`` (type ids 0 / 1). The question keeps at
  most :data:`leanlm.data.span_windows.MAX_QUERY_TOKENS` tokens; a context longer than the room left is cut into windows
  that overlap by ``doc_stride`` tokens (Hugging Face's meaning of the stride), each one a feature;
- labels: the token positions of the first gold answer's first and last character when the window
  holds the whole answer, else ([CLS], [CLS]) = (0, 0), as for an unanswerable question;
- training: the shared engine (AdamW, schedule, early stopping on dev F1 every ``eval_every``
  steps) through the classification runner's helpers;
- post-processing: per window the best span among the ``n_best`` highest start and end logits of
  context tokens with start <= end and at most ``max_answer_length`` tokens, scored
  start + end logit; per question the best span over its windows, cut from the context by the
  tokenizer's character offsets. When the task has unanswerable questions (v2.0: any in train), the
  null score, the smallest [CLS] start + end logit over the windows, beats a span scoring less:
  the prediction is then "" (no answer). Scored by the official F1 / EM (leanlm.evaluation.squad).
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from leanlm import paths
from leanlm.data.span_windows import check_window, query_budget, span_options
from leanlm.data.tasks import get_task
from leanlm.data.tokenizer import special_token_ids
from leanlm.evaluation import per_example
from leanlm.evaluation.metrics import compute_all
from leanlm.evaluation.squad import as_references
from leanlm.modeling.checkpoint import load_model
from leanlm.training.engine import Trainer
from leanlm.stages.finetune import (TaskBatches, TaskRunner, _load_split, finetune_train_config,
                                      held_out_metrics, task_record)
from leanlm.training.seeding import seed_everything
from leanlm.training.text_batches import collate


@dataclass
class SpanFeatures:
    """Model inputs of a list of span-QA rows, one entry per (row, context window)."""

    encoded: list[tuple[list[int], list[int]]] = field(default_factory=list)  # (input_ids, token_type_ids)
    labels: list[tuple[int, int]] = field(default_factory=list)  # answer (start, end) positions; (0, 0): none
    example: list[int] = field(default_factory=list)             # index of the row of each feature
    context_start: list[int] = field(default_factory=list)       # input position of the window's first token
    char_spans: list[np.ndarray] = field(default_factory=list)   # (window tokens, 2) offsets in the context

    def __len__(self) -> int:
        return len(self.encoded)


def answer_tokens(char_spans: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Indices of the first and last context token overlapping characters [start, end), or None."""
    first = int(np.searchsorted(char_spans[:, 1], start, side="right"))  # first token ending after start
    last = int(np.searchsorted(char_spans[:, 0], end, side="left")) - 1   # last token starting before end
    return (first, last) if first <= last and first < len(char_spans) else None


def prepare_features(tokenizer, rows: list[dict], max_seq_len: int, doc_stride: int) -> SpanFeatures:
    """Tokenise questions and contexts (each distinct context once) and cut the windows."""
    check_window(max_seq_len, doc_stride, "span QA features")
    ids = special_token_ids(tokenizer)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    questions = tokenizer.encode_batch([r["question"] for r in rows], add_special_tokens=False)
    contexts = list(dict.fromkeys(r["context"] for r in rows))
    encoded_contexts = dict(zip(contexts, tokenizer.encode_batch(contexts, add_special_tokens=False)))
    budget = query_budget(max_seq_len)
    out = SpanFeatures()
    for index, (row, question) in enumerate(zip(rows, questions)):
        context = encoded_contexts[row["context"]]
        query = question.ids[:budget]
        spans = np.asarray(context.offsets, dtype=np.int64).reshape(-1, 2)
        answer = None
        if row["answers"]["text"]:
            start = row["answers"]["answer_start"][0]
            answer = answer_tokens(spans, start, start + len(row["answers"]["text"][0]))
        room = max_seq_len - 3 - len(query)
        offset = len(query) + 2  # input position of the first context token
        window = 0
        while True:
            stop = min(window + room, len(context.ids))
            out.encoded.append(([ids["cls"], *query, ids["sep"], *context.ids[window:stop], ids["sep"]],
                                [0] * offset + [1] * (stop - window + 1)))
            inside = answer is not None and window <= answer[0] and answer[1] < stop
            out.labels.append((offset + answer[0] - window, offset + answer[1] - window) if inside else (0, 0))
            out.example.append(index)
            out.context_start.append(offset)
            out.char_spans.append(spans[window:stop])
            if stop >= len(context.ids):
                break
            window += room - doc_stride
    return out


@torch.no_grad()
def span_logits(model, features: SpanFeatures, pad_id: int, batch_size: int = 64) -> list[np.ndarray]:
    """(length, 2) start/end logits of every feature, padding cut off."""
    model.eval()
    device = next(model.parameters()).device
    out: list[np.ndarray] = []
    for start in range(0, len(features), batch_size):
        chunk = features.encoded[start : start + batch_size]
        batch = {k: v.to(device) for k, v in collate(chunk, pad_id).items()}
        logits = model(**batch)["logits"].float().cpu().numpy()
        out.extend(logits[i, : len(ids)] for i, (ids, _) in enumerate(chunk))
    model.train()
    return out


def best_span(logits: np.ndarray, context_start: int, n_tokens: int, n_best: int,
              max_answer_length: int) -> tuple[float, int, int] | None:
    """(score, first, last) of the best valid span of context tokens of one feature, or None.

    Candidates pair the ``n_best`` highest start logits with the ``n_best`` highest end logits among
    the window's context tokens; valid: first <= last, at most ``max_answer_length`` tokens.
    """
    if n_tokens == 0:
        return None
    start, end = logits[context_start : context_start + n_tokens, 0], logits[context_start : context_start + n_tokens, 1]
    firsts, lasts = np.argsort(-start, kind="stable")[:n_best], np.argsort(-end, kind="stable")[:n_best]
    scores = start[firsts][:, None] + end[lasts][None, :]
    length = lasts[None, :] - firsts[:, None] + 1
    scores = np.where((length >= 1) & (length <= max_answer_length), scores, -np.inf)
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
    if not np.isfinite(scores[i, j]):
        return None
    return float(scores[i, j]), int(firsts[i]), int(lasts[j])


def predict_answers(rows: list[dict], features: SpanFeatures, logits: list[np.ndarray], n_best: int,
                    max_answer_length: int, allow_null: bool) -> list[str]:
    """The answer text predicted for each row ("" = no answer)."""
    best: list[tuple[float, int, int, int] | None] = [None] * len(rows)  # (score, feature, first, last)
    null = [math.inf] * len(rows)
    for f, feature_logits in enumerate(logits):
        row = features.example[f]
        null[row] = min(null[row], float(feature_logits[0, 0] + feature_logits[0, 1]))
        span = best_span(feature_logits, features.context_start[f], len(features.char_spans[f]), n_best, max_answer_length)
        if span is not None and (best[row] is None or span[0] > best[row][0]):
            best[row] = (span[0], f, span[1], span[2])
    answers = []
    for r, row in enumerate(rows):
        if best[r] is None or (allow_null and null[r] > best[r][0]):
            answers.append("")
            continue
        _, f, first, last = best[r]
        spans = features.char_spans[f]
        answers.append(row["context"][spans[first, 0] : spans[last, 1]])
    return answers


def score_rows(model, rows: list[dict], features: SpanFeatures, metrics: list[str], pad_id: int,
               options: dict, allow_null: bool, keep: list | None = None) -> dict[str, float]:
    """F1 / EM (the task's metrics) of the model's answers to ``rows``; ``keep`` receives the answers."""
    answers = predict_answers(rows, features, span_logits(model, features, pad_id), options["n_best"],
                              options["max_answer_length"], allow_null)
    if keep is not None:
        keep[:] = answers
    return compute_all(metrics, np.asarray(answers, dtype=object), as_references(r["answers"]["text"] for r in rows))


class SpanQARunner(TaskRunner):
    """SQuAD-style extractive QA: fine-tune the pretrained encoder with a span head, score F1/EM."""

    def __call__(self, config, run_id, family, task, seed, tokenizer):
        return finetune_span_qa(config, run_id, family, task, seed, tokenizer)


def finetune_span_qa(config: dict, run_id: str, family: str, task: str, seed: int, tokenizer) -> dict:
    profile, settings = config["profile"], config["finetune"][family]
    spec = get_task(task)
    options = span_options(settings, family)
    pad_id = special_token_ids(tokenizer)["pad"]
    rows = {split: _load_split(profile, task, split) for split in ("train", "validation", "test")}
    features = {split: prepare_features(tokenizer, split_rows, settings["max_seq_len"], options["doc_stride"])
                for split, split_rows in rows.items()}
    allow_null = any(not r["answers"]["text"] for r in rows["train"])  # v2.0-style task

    seed_everything(seed)
    model = load_model(paths.models_dir(profile) / run_id, kind="qa")
    train = features["train"]
    train_config = finetune_train_config(settings, task, run_id, seed, len(train))

    def evaluate(m, split: str = "validation") -> dict:
        return score_rows(m, rows[split], features[split], spec.metrics, pad_id, options, allow_null)

    scratch = paths.models_dir(profile) / run_id / "finetune" / f"{task}-seed{seed}"
    trainer = Trainer(
        model,
        train_config,
        TaskBatches(train.encoded, train.labels, settings["batch_size"], 1, seed, pad_id, regression=False),
        run_dir=scratch,
        evaluate=evaluate,
        primary_metric=spec.primary_metric,
        higher_is_better=True,
    )
    started = time.time()
    summary = trainer.fit()
    answers: list = []  # the final dev answers, kept per question for a claim's paired bootstrap
    metrics = score_rows(model, rows["validation"], features["validation"], spec.metrics, pad_id, options, allow_null,
                         keep=answers)  # the engine restored the best evaluation's weights
    test_metrics = held_out_metrics(rows["test"], lambda: evaluate(model, "test"))
    shutil.rmtree(scratch, ignore_errors=True)
    return task_record(task, seed, spec, metrics, test_metrics, summary, train_config, len(rows["train"]),
                       len(rows["validation"]), started, train_features=len(train),
                       validation_features=len(features["validation"]), null_answers=allow_null,
                       per_example=per_example.span_qa(answers, [r["answers"]["text"] for r in rows["validation"]],
                                                       spec.metrics))


Runner = SpanQARunner
