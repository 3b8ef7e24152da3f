"""``leanlm finetune``: fine-tune one pretrained model on every task of a family, every seed.

One job per (model, family) keeps Snakemake's per-job overhead negligible; inside it each
(task, seed) starts from the same pretrained encoder with a freshly seeded head, trains with the
shared engine (early stopping on the task's primary metric, evaluated on the dev split as the
thesis reports dev-set scores), and is scored with the thesis's metric. Everything lands in one
``results/<profile>/runs/<run_id>/<family>.json``.

A killed job loses at most part of one (task, seed): each finished (task, seed) result is written at
once (atomically) to ``results/<profile>/runs/<run_id>/.<family>.parts/<task>-seed<seed>.json`` and a rerun
takes it instead of training again, provided it was made with the same settings and pretrained model
(a fingerprint of both is stored with it); within a task the engine checkpoints at every evaluation
(every epoch by default), so a rerun resumes mid-task exactly. The parts are deleted once the family's
JSON is written. A second job fine-tuning the same run on the same family fails at once (run lock).
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import math
import shutil
import time
from typing import Callable

import torch

from leanlm import paths
from leanlm.data.tasks import get_task
from leanlm.data.tokenizer import special_token_id
from leanlm.errors import ConfigError, DataError
from leanlm.evaluation import per_example
from leanlm.evaluation.metrics import compute_all
from leanlm.evaluation.superglue_metrics import attach_groups
from leanlm.io import check_writable, json_text, read_jsonl, sha256_file, write_json
from leanlm.modeling.counting import embedding_parameters, model_attention_parameters, total_parameters
from leanlm.provenance import hardware
# The folder leanlm/runners is the registry: runner <name> (an input shape, or a family that owns its runner)
# is class ``Runner`` of leanlm.runners.<name>, imported when a job asks for it; likewise the run's input
# route (leanlm/routes: its tokenizer, and ch. 2's hash features).
from leanlm.plugins import TASK_RUNNERS, input_route, runner_name
from leanlm.runs import finetune_seeds, finetune_settings, get_run
from leanlm.training.checkpointing import run_lock
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.hub_checkpoint import load_finetune_model, load_pretrained_model, model_record
from leanlm.training.seeding import seed_everything
from leanlm.training.schedules import warmup_steps_from_ratio
from leanlm.training.step_timing import InferenceClock, inference_timing
from leanlm.training.text_batches import (collate, encode_examples, example_indices, micro_batches_per_step,
                                          padded_dims)

log = logging.getLogger(__name__)


def _load_split(profile: str, task: str, split: str) -> list[dict]:
    """One split's rows; train and validation must have some, test is empty where nothing is held out
    (data.tasks.heldout_fraction 0: the full official train split is trained on, DESIGN §8)."""
    path = paths.data_dir(profile) / "tasks" / task / f"{split}.jsonl"
    if not path.is_file():
        raise DataError(f"task file {path} is missing; run the data stage (`snakemake data` or `dvc repro tasks@{profile}`)")
    rows = read_jsonl(path)
    if not rows and split != "test":
        raise DataError(f"task file {path} is empty")
    return rows


def held_out_metrics(test_rows: list[dict], score: Callable[[], dict]) -> dict | None:
    """The test split's metrics, or None when the profile held nothing out (the result's test_metrics)."""
    return score() if test_rows else None


class TaskBatches:
    """``batch_at(step, micro)`` over encoded task examples, reshuffled every epoch by the seed."""

    def __init__(self, encoded, labels, batch_size: int, grad_accum: int, seed: int, pad_id: int, regression: bool,
                 features=None):
        self.encoded, self.batch_size = encoded, batch_size
        self.per_step = micro_batches_per_step(grad_accum)
        self.seed, self.pad_id = seed, pad_id
        self.labels = torch.tensor(labels, dtype=torch.float if regression else torch.long)
        self.features = features  # ids -> hash features, for hash-embedding models (the run's input route)

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        start = (step * self.per_step + micro) * self.batch_size
        idx = example_indices(len(self.encoded), self.seed, start, self.batch_size).tolist()
        batch = collate([self.encoded[i] for i in idx], self.pad_id)
        if self.features is not None:
            batch.update(self.features(batch["input_ids"]))
        batch["labels"] = self.labels[idx]
        return batch

    def varying_dims(self, batch: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
        """The padded length, which torch.compile compiles as a symbol (leanlm.training.compiling); not in
        the labels, which are per example (a class, a score, SQuAD's (B, 2) start and end)."""
        return padded_dims({name: tensor for name, tensor in batch.items() if name != "labels"})


@torch.no_grad()
def predict(model, encoded, pad_id: int, regression: bool, batch_size: int = 64, features=None,
            clock: InferenceClock | None = None) -> list:
    """Predictions for ``encoded``; ``features`` adds hash features to each batch, and ``clock`` (Table
    2.3) gets the forward passes' seconds, each ending with the ``tolist`` that waits for the device."""
    model.eval()
    device = next(model.parameters()).device
    preds: list = []
    for start in range(0, len(encoded), batch_size):
        batch = collate(encoded[start : start + batch_size], pad_id)
        if features is not None:
            batch.update(features(batch["input_ids"]))
        batch = {k: v.to(device) for k, v in batch.items()}
        started = time.perf_counter()
        logits = model(**batch)["logits"].float()
        preds.extend(logits.squeeze(-1).tolist() if regression else logits.argmax(-1).tolist())
        if clock is not None:
            clock.add(time.perf_counter() - started, len(logits))
    model.train()
    return preds


def _eval_every(settings: dict, task: str, steps_per_epoch: int) -> int:
    value = settings["eval_every"]
    if isinstance(value, dict):
        value = value.get(task)
    return int(value) if value else steps_per_epoch


def _warmup_steps(settings: dict, task: str, total_steps: int) -> int:
    # Table 3.12 prints SQuAD's warmup as step counts (3327 / 4950), GLUE's and SuperGLUE's as 6% of steps.
    value = settings.get("warmup_steps")
    if isinstance(value, dict):
        value = value.get(task)
    return int(value) if value is not None else warmup_steps_from_ratio(total_steps, settings["warmup_ratio"])


def finetune_train_config(settings: dict, task: str, run_id: str, seed: int, n_train: int) -> TrainConfig:
    """The engine's settings for fine-tuning one task with one seed, from a profile's finetune block
    (shared by every task runner: classification, multiple choice, span QA). Warmup is
    ``warmup_steps`` (an int, or per task) where the block sets it, else ``warmup_ratio`` of the steps."""
    steps_per_epoch = math.ceil(n_train / settings["batch_size"])
    total_steps = settings["epochs"] * steps_per_epoch
    return TrainConfig(
        total_steps=total_steps,
        lr=settings["lr"],
        schedule=settings["schedule"],
        warmup_steps=_warmup_steps(settings, task, total_steps),
        weight_decay=settings["weight_decay"],
        adam_betas=tuple(settings["adam_betas"]),
        adam_eps=settings["adam_eps"],
        clip_norm=settings["clip_norm"],
        seed=seed,
        eval_every=_eval_every(settings, task, steps_per_epoch),
        # A checkpoint at every evaluation: a killed job resumes mid-task (paper GLUE: 20 epochs a task).
        checkpoint_every=_eval_every(settings, task, steps_per_epoch),
        early_stopping_patience=settings["early_stopping_patience"],
        desc=f"{run_id} {task} seed {seed}",
        # Optional (schema: finetune.<family>.compile); absent, the engine's default ("auto": on CUDA).
        compile=settings.get("compile", TrainConfig.compile),
    )


class TaskRunner(abc.ABC):
    """Fine-tunes (or only evaluates) one pretrained model on one task with one seed.

    Registered in :data:`TASK_RUNNERS` by the task's input shape. ``seeded = False`` marks runners
    whose result does not depend on the seed (e.g. perplexity of the pretrained model): they run
    once, with the first seed. ``__call__`` returns the per-task result: task, seed, metrics
    (validation), primary_metric, primary, and whatever else the runner measures.
    """

    seeded: bool = True

    @classmethod
    def is_seeded(cls, settings: dict) -> bool:
        """Whether this family's results depend on the seed under ``settings`` (its finetune block):
        ``seeded`` unless a runner's settings decide (the lm runner: fine-tuned or zero-shot)."""
        return cls.seeded

    @abc.abstractmethod
    def __call__(self, config: dict, run_id: str, family: str, task: str, seed: int, tokenizer) -> dict:
        """Fine-tune (or evaluate) and score one (task, seed): the per-task result described above."""


def task_record(task: str, seed: int, spec, metrics: dict, test_metrics: dict, summary: dict,
                train_config: TrainConfig, train_examples: int, validation_examples: int, started: float,
                **extra) -> dict:
    """The result every task runner returns for one (task, seed): dev and test metrics, the primary
    metric, when training stopped improving and how long it took; ``extra`` adds a runner's own fields
    (SQuAD's feature counts, GLUE's inference clock)."""
    return {
        "task": task,
        "seed": seed,
        "metrics": metrics,
        "test_metrics": test_metrics,
        "primary_metric": spec.primary_metric,
        "primary": metrics[spec.primary_metric],
        "best_step": summary.get("best_step"),
        "steps": train_config.total_steps,
        "warmup_steps": train_config.warmup_steps,
        "train_examples": train_examples,
        "validation_examples": validation_examples,
        "train_seconds": time.time() - started,
        **extra,
    }


class TextClassificationRunner(TaskRunner):
    """GLUE-style single-text / text-pair classification and regression."""

    def __call__(self, config, run_id, family, task, seed, tokenizer):
        return finetune_task(config, run_id, family, task, seed, tokenizer)


def _family_settings(config: dict, run_id: str, family: str) -> dict:
    """finetune.<family> with the run's experiment's variant laid over it (ch. 2: glue_ch2); a bare
    config without an experiment matrix (a direct call, as in unit tests) has only the block."""
    if "_matrix" not in config:
        return config["finetune"][family]
    return finetune_settings(config, get_run(config, run_id), family)


def _features(config: dict, run_id: str, model, tokenizer):
    """The per-token inputs the run's input route adds to each batch beyond its ids (ch. 2's hash features),
    else None; a bare config without an experiment matrix (a direct call) names no run, hence no route."""
    if "_matrix" not in config:
        return None
    return input_route(get_run(config, run_id)).features(model.config, tokenizer)


def finetune_task(config: dict, run_id: str, family: str, task: str, seed: int, tokenizer) -> dict:
    profile, settings = config["profile"], _family_settings(config, run_id, family)
    spec = get_task(task)
    regression = spec.label_kind == "regression"
    pad_id = special_token_id(tokenizer, "pad")  # [PAD], or RoBERTa's <pad>
    train_rows = _load_split(profile, task, "train")
    dev_rows = _load_split(profile, task, "validation")
    test_rows = _load_split(profile, task, "test")
    train_enc = encode_examples(tokenizer, train_rows, settings["max_seq_len"])
    dev_enc = encode_examples(tokenizer, dev_rows, settings["max_seq_len"])
    test_enc = encode_examples(tokenizer, test_rows, settings["max_seq_len"])
    dev_labels = [r["label"] for r in dev_rows]

    seed_everything(seed)
    # A leanlm checkpoint, or a Hugging Face one (CANINE-C, objective hub).
    model = load_finetune_model(paths.models_dir(profile) / run_id, num_labels=spec.num_labels)
    features = _features(config, run_id, model, tokenizer)  # hash embeddings' per-token inputs, else None
    train_config = finetune_train_config(settings, task, run_id, seed, len(train_rows))

    last_dev_preds: list = []

    def evaluate(m, clock: InferenceClock | None = None) -> dict:
        # Grouped tasks (MultiRC: rows carry the question id) score (group, value) pairs, for per-group EM.
        preds = predict(m, dev_enc, pad_id, regression, features=features, clock=clock)
        last_dev_preds[:] = preds
        return compute_all(spec.metrics, attach_groups(dev_rows, preds), attach_groups(dev_rows, dev_labels))

    scratch = paths.models_dir(profile) / run_id / "finetune" / f"{task}-seed{seed}"
    trainer = Trainer(
        model,
        train_config,
        TaskBatches(train_enc, [r["label"] for r in train_rows], settings["batch_size"], 1, seed, pad_id, regression,
                    features=features),
        run_dir=scratch,
        evaluate=evaluate,
        primary_metric=spec.primary_metric,
        higher_is_better=True,
    )
    started = time.time()
    summary = trainer.fit()
    clock = InferenceClock()  # Table 2.3's inference time: the final dev evaluation's forward passes
    metrics = evaluate(model, clock)  # the best state is restored by the engine
    test_metrics = held_out_metrics(test_rows, lambda: compute_all(
        spec.metrics, attach_groups(test_rows, predict(model, test_enc, pad_id, regression, features=features)),
        attach_groups(test_rows, [r["label"] for r in test_rows])))
    shutil.rmtree(scratch, ignore_errors=True)
    return task_record(task, seed, spec, metrics, test_metrics, summary, train_config, len(train_rows),
                       len(dev_rows), started, inference_seconds=clock.seconds,
                       inference_examples=clock.examples,
                       inference_seconds_per_sample=clock.seconds_per_sample,
                       # The final dev predictions, per example: what a claim's paired bootstrap resamples.
                       per_example=per_example.classification(last_dev_preds, dev_labels, spec.metrics))


def finetune(config: dict, run_id: str, family: str) -> dict:
    run = get_run(config, run_id)
    if family not in run.finetune:
        raise ConfigError(f"run {run_id} is not fine-tuned on {family!r}; its families: {', '.join(run.finetune)}")
    profile = config["profile"]
    started = time.time()
    # The profile's tokenizer; ch. 2's hash runs: their pretraining's codebook; CANINE-C: characters.
    tokenizer = input_route(run).finetuning_tokenizer(config, run)
    settings, seeds = finetune_settings(config, run, family), finetune_seeds(config, run, family)
    results = []
    out = paths.results_dir(profile) / "runs" / run_id / f"{family}.json"
    check_writable(out.parent, f"the {family} results into")
    parts = out.with_name(f".{family}.parts")  # hidden: aggregation reads runs/*/*.json only
    # The model fine-tuned from (finetune_task) and the one evaluated as is (evaluate_from: ch. 4's skip).
    key = {"settings": settings, "seeds": seeds, "model": model_fingerprint(paths.models_dir(profile) / run_id),
           "evaluated_model": model_fingerprint(paths.models_dir(profile) / (run.evaluate_from or run_id))}
    with run_lock(out.parent, run_id, f"fine-tuned on {family}", f".{family}.lock"):
        for task in settings["tasks"]:
            # A family may own its runner (ch. 4's lm_eval, analysis); otherwise the task's input shape picks it.
            runner = TASK_RUNNERS.get(runner_name(family, task))()
            for seed in seeds if runner.is_seeded(settings) else seeds[:1]:
                part = parts / f"{task}-seed{seed}.json"
                result = finished_result(part, {**key, "task": task, "seed": seed})
                if result is None:
                    result = runner(config, run_id, family, task, seed, tokenizer)
                    write_json(part, {"key": part_key({**key, "task": task, "seed": seed}), "result": result})
                else:
                    log.info("%s %s seed %d: finished by an earlier job (%s)", run_id, task, seed, part)
                log.info("%s %s seed %d: %s = %.4f", run_id, task, seed, result["primary_metric"], result["primary"])
                results.append(result)
        record = _family_record(config, run, family, settings, seeds, results, started)
        write_json(out, record)
        shutil.rmtree(parts, ignore_errors=True)
    return record


def _family_record(config: dict, run, family: str, settings: dict, seeds: list, results: list,
                   started: float) -> dict:
    profile, run_id = config["profile"], run.run_id
    # The pretrained model, as saved (a run with evaluate_from, ch. 4's skip, has none of its own).
    probe = load_pretrained_model(paths.models_dir(profile) / (run.evaluate_from or run_id))
    record = {
        "profile": profile,
        "experiment": run.experiment,
        "run": run.name,
        "run_id": run_id,
        "family": family,
        "evaluate_from": run.evaluate_from,
        "skip_simple_layers": run.skip_simple_layers,
        "model": model_record(probe, run),
        "finetune": settings,
        "seeds": seeds,
        "parameters": {
            "total": total_parameters(probe),
            "attention": model_attention_parameters(probe),
            "embedding": embedding_parameters(probe),
        },
        "results": results,
        # inference_seconds_per_sample: Table 2.3 (forward time per dev example, every task and seed).
        "timing": {"seconds": time.time() - started, **inference_timing(results)},
        "hardware": hardware(),
    }
    return record


def model_fingerprint(directory) -> dict:
    """What identifies a pretrained model cheaply: its config.json's SHA-256 (which records the weights'
    own SHA-256) and the weights' size and modification time; empty where there is no model."""
    config, weights = directory / "config.json", directory / "model.safetensors"
    found = {}
    if config.is_file():
        found["config_sha256"] = sha256_file(config)
    if weights.is_file():
        stat = weights.stat()
        found["weights"] = [stat.st_size, stat.st_mtime_ns]
    return found


def part_key(key: dict) -> str:
    """SHA-256 of a (task, seed) result's settings, seed and pretrained model."""
    return hashlib.sha256(json_text(key).encode()).hexdigest()


def finished_result(part, key: dict) -> dict | None:
    """The result an earlier job wrote to ``part`` for the same settings and model, else None (a part
    made under other settings is left to be overwritten, with a note)."""
    if not part.is_file():
        return None
    try:
        saved = json.loads(part.read_text(encoding="utf-8"))
        if saved["key"] == part_key(key):
            return saved["result"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        log.warning("%s is unreadable (%s); training this task and seed again", part, exc)
        return None
    log.info("%s was made with other settings or another pretrained model; training again", part)
    return None
