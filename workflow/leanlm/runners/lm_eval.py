"""The ``lm_eval`` family runner: chapter 4's zero-shot evaluation through lm-evaluation-harness.

Nothing is trained. For each task of ``finetune.lm_eval.tasks`` (params/tasks/lm_eval.yaml) the run's
trained causal LM (:func:`load_evaluated_model`: its own, or ``evaluate_from``'s with the simple layers
left out for Table 4.1's SKIP) is scored by lm-eval with our adapter
(:func:`leanlm.lm_eval.adapter.run_lm_eval`): the paper profile runs lm-eval's own task by
its name (``hub.task``; with a hub mirror set, the same task definition on the mirror's copy of its
data, :mod:`leanlm.lm_eval.mirror`), offline profiles the local-JSON stand-in the tasks stage wrote
under ``data/<profile>/tasks/lm_eval/`` (:mod:`leanlm.lm_eval.stage`). The result does not depend on
the seed, so it runs once (``seeded = False``). The text is encoded with the tokenizer the model was
trained with (:func:`leanlm.training.run_tokenizer.evaluation_tokenizer`: ch. 4's Pythia BPE where the
profile names it, saved with the model; else the profile's).

Each per-task result (in ``results/<profile>/runs/<run_id>/lm_eval.json``, written by
:func:`leanlm.stages.finetune.finetune`) holds ``metrics``: the task's metrics as lm-eval names them
(``acc``, ``acc_norm``; ``word_perplexity``, ``byte_perplexity``, ``bits_per_byte``; LAMBADA's
``perplexity`` and ``acc``) plus their ``*_stderr`` where lm-eval computes one; ``lm_eval_task`` (the task
lm-eval ran), ``thesis_name``, ``examples`` and ``baselines`` (the Rnd. Guess / Majority rows over the
same documents, :mod:`leanlm.lm_eval.baselines`).

Settings (``finetune.lm_eval``): ``batch_size`` (windows per forward pass), ``limit`` (documents per
task, null = all: the paper profile), ``bootstrap_iters`` (lm-eval's bootstrap for perplexity standard
errors; default 100000, lm-eval's own; 0 computes no standard error at all).
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from leanlm import paths
from leanlm.lm_eval.stage import include_path, lm_eval_include, lm_eval_task_name
from leanlm.data.tasks import get_task
from leanlm.errors import ConfigError, DataError, TrainingError
from leanlm.evaluation import per_example
from leanlm.runs import get_run
from leanlm.stages.finetune import TaskRunner

log = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_ITERS = 100_000  # lm-eval's default
_CACHE: dict[tuple, nn.Module] = {}  # one evaluated model, reused by the tasks of a job


def evaluation_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def trained_model_dir(config: dict, run_id: str) -> Path:
    """models/<profile>/<run>: the run's own checkpoint, or the one it evaluates (``evaluate_from``)."""
    run = get_run(config, run_id)
    return paths.models_dir(config["profile"]) / (run.evaluate_from or run_id)


def load_evaluated_model(config: dict, run_id: str) -> nn.Module:
    """The causal LM run ``run_id`` is evaluated with, in eval mode on :func:`evaluation_device`.

    ``skip_simple_layers`` runs (Table 4.1's SKIP) leave out the simple layers of the trained hybrid
    (``layouts.skip_set``), without retraining. The model is cached for the job's next task.
    """
    from leanlm.modeling.checkpoint import load_model
    from leanlm.modeling.layouts import skip_set

    run = get_run(config, run_id)
    directory = trained_model_dir(config, run_id)
    weights = directory / "model.safetensors"
    stamp = weights.stat().st_mtime_ns if weights.is_file() else None
    key = (str(directory), stamp, run.skip_simple_layers)
    if key in _CACHE:
        return _CACHE[key]
    try:
        model = load_model(directory, kind="causal_lm")
    except (ConfigError, TrainingError) as err:
        raise ConfigError(f"run {run_id} is evaluated with lm-eval, which needs a causal LM; the model at "
                          f"{directory} cannot be loaded as one: {err}") from None
    if run.skip_simple_layers:
        model_config = model.config
        skip = skip_set(model_config.layout, model_config.n_layers)
        if not hasattr(model, "skip_layers") or not 0 < len(skip) < model_config.n_layers:
            raise ConfigError(f"run {run_id} skips the simple layers of {directory}, but its layout "
                              f"{model_config.layout!r} over {model_config.n_layers} layers has {len(skip)} simple layer(s); "
                              f"skip_simple_layers needs a hybrid (standard and simple layers)")
        model.skip_layers = skip
    _CACHE.clear()
    _CACHE[key] = model.to(evaluation_device()).eval()
    return _CACHE[key]


def task_name(config: dict, task: str) -> str:
    """The lm-eval task that evaluates a task of an lm-eval family under the profile's source (its
    ``include_path`` for one evaluation: :func:`leanlm.lm_eval.stage.lm_eval_include`)."""
    return lm_eval_task_name(get_task(task), config["source"])


def check_local_tasks(config: dict, names: list[str]) -> None:
    """DataError unless every local stand-in of ``names`` was written by the tasks stage (hub: nothing)."""
    include = include_path(config["profile"], config["source"])
    if include is None:
        return
    if not include.is_dir():
        raise DataError(f"{include} is missing: run the data stage (`snakemake data` or "
                        f"`dvc repro tasks@{config['profile']}`) to write the lm-eval stand-ins")
    missing = [name for name in names if not (include / f"{name}.yaml").is_file()]
    if missing:
        manifest = include / "MANIFEST.json"
        skipped = json.loads(manifest.read_text(encoding="utf-8")).get("skipped", {}) if manifest.is_file() else {}
        reasons = "; ".join(f"{name}: {skipped.get(name, 'not built')}" for name in missing)
        raise DataError(f"lm-eval stand-in(s) missing under {include} ({reasons}); the held-out corpus is too small "
                        f"for them: raise data.corpus.test_fraction or use more documents, then rerun the data stage")


def _metrics(spec, scores: dict[str, float], name: str) -> dict[str, float]:
    missing = [m for m in spec.metrics if m not in scores]
    if missing:
        raise DataError(f"lm-eval task {name} (task {spec.name}) reported {sorted(scores)}, not {missing}; the task "
                        f"table (params/tasks/lm_eval.yaml) and the lm-eval task disagree")
    out = {}
    for metric in spec.metrics:
        out[metric] = scores[metric]
        if f"{metric}_stderr" in scores:
            out[f"{metric}_stderr"] = scores[f"{metric}_stderr"]
    return out


class LMEvalRunner(TaskRunner):
    """Zero-shot lm-eval scores of the run's trained model on one task (seed-independent).

    The first task of a job evaluates every task of the family in one lm-eval call (lm-eval's fixed
    cost per call, e.g. collecting environment information, is paid once) and keeps the scores for
    the family's other tasks.
    """

    seeded = False

    def __call__(self, config: dict, run_id: str, family: str, task: str, seed: int, tokenizer) -> dict:
        from leanlm.training.run_tokenizer import evaluation_tokenizer

        spec = get_task(task)
        tokenizer = evaluation_tokenizer(config, run_id, tokenizer)  # the one the model was trained with
        scores, baselines, seconds, samples = _family_scores(config, run_id, family, tokenizer)
        name = task_name(config, task)
        if name not in scores:
            raise DataError(f"lm-eval returned no results for task {name} (got {sorted(scores)})")
        metrics = _metrics(spec, scores[name], name)
        log.info("%s %s (%s): %s", run_id, task, name, ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        limit = config["finetune"][family].get("limit")
        return {
            "task": task,
            "seed": seed,
            "lm_eval_task": name,
            "thesis_name": spec.thesis_name,
            "split": baselines[name]["split"],
            "metrics": metrics,
            "primary_metric": spec.primary_metric,
            "primary": metrics[spec.primary_metric],
            "examples": int(scores[name].get("sample_len", baselines[name]["examples"])),
            "limit": limit,
            "baselines": baselines[name],
            "eval_seconds": seconds,  # of the whole family's lm-eval call
            # Per-document scores (what a claim's paired bootstrap resamples; leanlm.evaluation.per_example).
            "per_example": per_example.lm_eval(samples.get(name, [])),
        }


_SCORES: dict[tuple, tuple[dict, dict, float, dict]] = {}


@contextmanager
def _without_environment_report():
    """lm-eval ends every evaluation by describing the environment (pip and conda listings, GPU
    queries: subprocesses, and an import of transformers), about a second per call and a result we
    never read: the family record keeps its own ``hardware``. Skip it for the duration."""
    import lm_eval.evaluator as evaluator

    original = evaluator.add_env_info
    evaluator.add_env_info = lambda storage: None
    try:
        yield
    finally:
        evaluator.add_env_info = original


def _family_scores(config: dict, run_id: str, family: str, tokenizer) -> tuple[dict, dict, float, dict]:
    """lm-eval's scores, the baseline rows and the per-document scores of every task of ``family`` for
    ``run_id``, computed once."""
    from leanlm.lm_eval.adapter import run_lm_eval
    from leanlm.lm_eval.baselines import load_lm_eval_tasks, task_baselines

    settings = config["finetune"][family]
    names = [task_name(config, task) for task in settings["tasks"]]
    key = (run_id, family, tuple(names), config["_params_file"])
    if key in _SCORES:
        return _SCORES[key]
    check_local_tasks(config, names)
    model = load_evaluated_model(config, run_id)
    limit = settings.get("limit")
    started = time.time()
    samples: dict = {}
    with lm_eval_include(config, names) as include:
        with _without_environment_report():
            scores = run_lm_eval(model, tokenizer, names, include, limit=limit, batch_size=settings["batch_size"],
                                 device=None, bootstrap_iters=settings.get("bootstrap_iters", DEFAULT_BOOTSTRAP_ITERS),
                                 samples=samples)
        seconds = time.time() - started
        tasks = load_lm_eval_tasks(names, include)
        baselines = {name: task_baselines(tasks[name], tokenizer, limit) for name in names}
    _SCORES.clear()
    _SCORES[key] = (scores, baselines, seconds, samples)
    return _SCORES[key]


Runner = LMEvalRunner
