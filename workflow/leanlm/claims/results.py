"""What the claims read from a profile's results: measurements (per seed, with per-example data where
the run kept it), ch. 4's baseline rows, parameter counts and pretraining step times.

Per-example data lives in each (task, seed) result of a family's results JSON as

    "per_example": {"data": {field: [...]}, "statistics": {metric: [statistic, {role: field}]}}

``statistics`` says which function of which fields gives each metric (leanlm.claims.stats.STATISTICS:
``mean`` of a score, ``perplexity`` from negative log-likelihoods and units, or a metric recomputed
from ``prediction`` and ``reference``). A metric it does not list is resampled at the seed level only.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from leanlm import paths
from leanlm.claims.stats import FIELDS, PAIR_FIELDS, STATISTICS, Measurement, SeedScores
from leanlm.errors import LeanLMError


class Missing(Exception):
    """A result the claim needs is absent at this profile (the reason is the message)."""


@lru_cache(maxsize=512)
def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LeanLMError(f"{path}: not a readable results JSON ({exc}); delete it and rerun its job") from None


def family_record(profile: str, run_id: str, family: str) -> dict:
    path = paths.results_dir(profile) / "runs" / run_id / f"{family}.json"
    if not path.is_file():
        raise Missing(f"no results of {run_id} on {family} ({path})")
    return _read(path)


def task_results(profile: str, run_id: str, family: str, task: str) -> list[dict]:
    results = [r for r in family_record(profile, run_id, family).get("results", []) if r.get("task") == task]
    if not results:
        raise Missing(f"{run_id} has no {task} results in its {family} record")
    return sorted(results, key=lambda r: r["seed"])


def resolve_metric(results: list[dict], metric: str, task: str) -> str:
    """``primary`` -> the task's primary metric; ``<prefix>@max`` / ``@min`` -> the metric of that
    prefix with the largest / smallest number (``perplexity_ctx@max``: the longest context)."""
    if metric == "primary":
        return results[0]["primary_metric"]
    if metric.endswith(("@max", "@min")):
        prefix = metric[:-4]
        sizes = sorted(int(m[len(prefix):]) for m in results[0]["metrics"] if m.startswith(prefix)
                       and m[len(prefix):].isdigit())
        if not sizes:
            raise Missing(f"{task} has no {prefix}<n> metrics")
        return f"{prefix}{sizes[-1] if metric.endswith('@max') else sizes[0]}"
    return metric


def _seed_scores(result: dict, metric: str, eval_set: str, where: str) -> SeedScores:
    if metric not in result.get("metrics", {}):
        raise Missing(f"{where} has no metric {metric}")
    value = float(result["metrics"][metric])
    per_example = result.get("per_example") or {}
    spec = (per_example.get("statistics") or {}).get(metric)
    if not spec:
        return SeedScores(seed=int(result["seed"]), value=value, eval_set=eval_set)
    statistic, roles = spec
    if statistic not in STATISTICS:
        raise LeanLMError(f"{where}: per_example statistic {statistic!r} of {metric} is unknown")
    data = per_example.get("data") or {}
    need = FIELDS.get(statistic, PAIR_FIELDS)
    try:
        examples = {role: np.asarray(data[roles.get(role, role)]) for role in need}
    except KeyError as err:
        raise LeanLMError(f"{where}: per_example of {metric} names field {err} that its data lacks") from None
    return SeedScores(seed=int(result["seed"]), value=value, statistic=statistic, examples=examples, eval_set=eval_set)


def measurement(profile: str, run_id: str, family: str, task: str, metric: str) -> tuple[Measurement, str]:
    """The run's score on one task (every seed; per-example data where kept) and the metric resolved."""
    results = task_results(profile, run_id, family, task)
    name = resolve_metric(results, metric, task)
    where = f"results/{profile}/runs/{run_id}/{family}.json task {task}"
    seeds = tuple(_seed_scores(r, name, f"{family}/{task}", f"{where} seed {r['seed']}") for r in results)
    return Measurement(seeds), name


def attention_parameters(profile: str, run_id: str, family: str) -> int:
    """The attention parameter count the thesis uses for PEoP (Table 3.1's #params)."""
    return int(family_record(profile, run_id, family)["parameters"]["attention"])


def baseline_value(profile: str, which: str, task: str, metric: str) -> float:
    """Ch. 4's Rnd. Guess / Majority row of a task (results/<profile>/baselines/lm_eval.json)."""
    path = paths.results_dir(profile) / "baselines" / "lm_eval.json"
    if not path.is_file():
        raise Missing(f"no baseline rows ({path}); the profile runs no lm_eval family")
    row = (_read(path).get("tasks") or {}).get(task)
    if row is None:
        raise Missing(f"no baseline row for task {task} in {path}")
    values = row.get(which) or {}
    if metric not in values:
        raise Missing(f"{task} has no {which.replace('_', ' ')} row for {metric} (the thesis prints none)")
    return float(values[metric])


def pretraining_time(profile: str, run_id: str) -> Measurement:
    """Pretraining seconds per sample (Table 2.3) as one measurement: per-step times where recorded
    (resampled over steps), else the single value (no interval)."""
    path = paths.results_dir(profile) / "runs" / run_id / "pretrain.json"
    if not path.is_file():
        raise Missing(f"no pretraining record of {run_id} ({path})")
    timing = _read(path).get("timing") or {}
    value = timing.get("seconds_per_sample")
    if value is None:
        raise Missing(f"{path}: no seconds_per_sample (fewer than two steps were timed)")
    steps, per_step = timing.get("step_seconds"), timing.get("samples_per_step")
    if steps and per_step:
        per_sample = np.asarray(steps, dtype=float) / float(per_step)
        return Measurement((SeedScores(seed=0, value=float(value), statistic="mean",
                                       examples={"score": per_sample}, eval_set=f"pretrain-steps/{run_id}"),))
    return Measurement((SeedScores(seed=0, value=float(value)),))
