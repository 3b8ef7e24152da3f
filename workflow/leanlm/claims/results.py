"""What the claims read from a profile's results: measurements (per seed, with per-example data where
the run kept it), ch. 4's baseline rows and parameter counts (the speed claims read the speed record:
:mod:`leanlm.claims.speed`).

Per-example data lives in each (task, seed) result of a family's results JSON as

    "per_example": {"data": {field: [...]}, "statistics": {metric: [statistic, {role: field}]}}

``statistics`` says which function of which fields gives each metric (leanlm.claims.stats.STATISTICS:
``mean`` of a score, ``perplexity`` from negative log-likelihoods and units, or a metric recomputed
from ``prediction`` and ``reference``). A metric it does not list is resampled at the seed level only.

Where the profile pretrains a run several times (``pretrain_seeds``), its measurement holds every replica's
results (``<run>@p<seed>``), which the interval resamples by pretraining seed too; a part reads the same
replicas' results whatever it compares, and the Majority row and whether predictions vary are the first
replica's.

A claim's interval resamples the per-example data while its A and B are the stored metrics, so the two
must say the same thing (issue 24). Before a claim uses a record, :class:`Results` refuses, with a
DataError naming the file, task and seed:

- a record not of this profile, run and family, or not made with the profile's settings
  (:class:`leanlm.record_settings.RecordChecker`);
- a metric that is not a finite number;
- per-example data that is not numbers, or whose fields differ in length;
- per-example data that does not give back the stored metric when the evaluation's own metric function
  recomputes it (:func:`recompute`), within :data:`RELATIVE_TOLERANCE`.

Not recomputable from what is stored, and said so in :func:`_per_example_target`: a metric with no
per-example statistic (MultiRC's grouped F1a/EM, lm-eval's bits per byte, the attention indicators),
whose stored value is used as is, at the seed level; and translation's BLEU, the mean over the last
epochs' checkpoints, of which only the last checkpoint's sentences are kept: its per-example data is
checked against that checkpoint's BLEU.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Mapping

import numpy as np

from leanlm import paths
from leanlm.claims.stats import FIELDS, PAIR_FIELDS, STATISTICS, Measurement, SeedScores
from leanlm.errors import DataError, LeanLMError
from leanlm.record_settings import RecordChecker, read_record
from leanlm.runs import replica_groups, replica_seed

# A stored metric and its recomputation from the per-example data are float64 functions of the same
# stored numbers (the data is written unrounded), differing only in summation order (NumPy against
# scikit-learn, SciPy, sacrebleu or lm-eval): about 1e-12 relative over the largest evaluation sets, and
# perplexity's exp turns an error in the mean NLL into the same relative error. One edited example moves
# a metric by about 1/n of its range, so 1e-6 still catches a single edit in a set of a million examples.
RELATIVE_TOLERANCE = 1e-6
# Beside it, an absolute floor for metrics at or near 0 (a correlation or an F1 of 0), where a relative
# tolerance alone would demand more than floating point gives.
ABSOLUTE_TOLERANCE = 1e-9


# Where the metric function of a statistic registers (leanlm.evaluation.metrics.METRICS), when not in
# metrics.py itself: imported on first use only (perplexity's module imports torch).
REGISTERED_IN = {"macro_f1": "leanlm.evaluation.superglue_metrics", "perplexity": "leanlm.evaluation.perplexity",
                 "bleu": "leanlm.evaluation.bleu"}


def recompute(statistic: str, examples: Mapping[str, np.ndarray]) -> float:
    """The metric that ``statistic`` (a key of leanlm.claims.stats.STATISTICS) gives on all of one
    evaluation's per-example data, ``examples`` keyed by role (``prediction``/``reference``, ``score``,
    ``nll``/``units``, BLEU's statistics), computed as the evaluation computed it: a registered metric of
    predictions and references (scikit-learn / SciPy); perplexity with the registered ``perplexity`` (exp
    of total NLL over total units, as the perplexity runner and lm-eval's word/byte perplexity pool them);
    corpus BLEU from the summed sentence statistics (:func:`leanlm.evaluation.bleu.bleu_from_statistics`,
    sacrebleu's own score of the corpus statistics); ``mean``: the mean of per-example scores, which is how
    SQuAD's F1/EM and lm-eval's accuracies are computed from the same scores.

    Not leanlm.claims.stats' vectorised statistics, the claims' own reimplementation for bootstrap draws:
    a check against them would not catch a record they misread."""
    from leanlm.evaluation.metrics import compute

    if statistic in REGISTERED_IN:
        importlib.import_module(REGISTERED_IN[statistic])
    if statistic == "mean":
        return float(np.mean(examples["score"]))
    if statistic == "perplexity":
        return compute("perplexity", examples["nll"], examples["units"])
    if statistic == "bleu":
        from leanlm.evaluation.bleu import STAT_FIELDS, bleu_from_statistics

        return bleu_from_statistics([float(np.sum(examples[field])) for field in STAT_FIELDS])
    return compute(statistic, examples["prediction"], examples["reference"])


class Missing(Exception):
    """A result the claim needs is absent at this profile (the reason is the message)."""


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


def _finite(value, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(
            f"{where}: {what} = {value!r} is not a finite number (a failed evaluation, or an edited or damaged "
            "file); find the cause in the job's log and rerun the job")
    return float(value)


def _examples(per_example: dict, statistic: str, roles: dict, metric: str, where: str) -> dict[str, np.ndarray]:
    """The per-example arrays of ``metric`` by role: numbers, one per example in every field."""
    data = per_example.get("data") or {}
    fields = {role: roles.get(role, role) for role in FIELDS.get(statistic, PAIR_FIELDS)}
    missing = sorted(f for f in fields.values() if f not in data)
    if missing:
        raise DataError(f"{where}: per_example of {metric} names field(s) {missing} that its data lacks; the file "
                        "was edited or damaged: rerun its job")
    examples = {}
    for role, name in fields.items():
        try:
            values = np.asarray(data[name])
        except ValueError:  # a list holding lists of other lengths: no array
            values = None
        # a scalar is 0-d, a string or a mixed list no number
        if values is None or values.ndim != 1 or values.dtype.kind not in "biuf":
            raise DataError(f"{where}: per_example field {name!r} of {metric} is not a list of numbers (one per "
                            "example); the file was edited or damaged: rerun its job")
        examples[role] = values
    lengths = {name: len(examples[role]) for role, name in fields.items()}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        listed = ", ".join(f"{name} {n}" for name, n in lengths.items())
        raise DataError(f"{where}: the per-example fields of {metric} must hold one entry per evaluation example "
                        f"each, but hold {listed}; the file was cut or edited: rerun its job")
    return examples


def _per_example_target(result: dict, metric: str, value: float) -> tuple[float, str]:
    """The stored value the per-example data must give back, and what it is. That is the metric itself,
    except where the record keeps the data of one part of an average: translation's BLEU is the mean over
    the last epochs' checkpoints (``checkpoints``), but only the last checkpoint's sentences are kept, so
    they are checked against that checkpoint's BLEU (the mean itself cannot be recomputed from them)."""
    checkpoints = result.get("checkpoints")
    if isinstance(checkpoints, list) and checkpoints and isinstance(checkpoints[-1], dict) and metric in checkpoints[-1]:
        return checkpoints[-1][metric], f"the last checkpoint's {metric} (of its checkpoints)"
    return value, f"its stored {metric}"


def _check_results_list(every, path: Path) -> None:
    """A record's ``results`` must be a list of objects (a damaged file raised a raw TypeError before)."""
    if not isinstance(every, list) or not all(isinstance(r, dict) for r in every):
        found = type(every).__name__ if not isinstance(every, list) else \
            f"a {next(type(r).__name__ for r in every if not isinstance(r, dict))} in it"
        raise DataError(f"{path}: its results must be a list of objects (one per task and seed), got {found}; the "
                        "file was edited or damaged: rerun its job")


class Results:
    """A profile's results as the claims read them, each record checked once (see the module docstring)."""

    def __init__(self, config: dict):
        self.config = config
        self.profile = config["profile"]
        self.params_file = config.get("_params_file", f"params/{self.profile}.yaml")
        self.checker = RecordChecker(config)
        self.replicas = replica_groups(config)  # each run's pretraining replicas (profile key pretrain_seeds)
        self._records: dict[Path, dict] = {}

    def _path(self, run_id: str, name: str) -> Path:
        return paths.results_dir(self.profile) / "runs" / run_id / f"{name}.json"

    def family_record(self, run_id: str, family: str) -> dict:
        path = self._path(run_id, family)
        if path not in self._records:
            if not path.is_file():
                raise Missing(f"no results of {run_id} on {family} ({path})")
            doc = read_record(path)
            self.checker.family(doc, path)  # of this profile, run and family, made with its settings
            _check_results_list(doc.get("results", []), path)
            self._records[path] = doc
        return self._records[path]

    def task_results(self, run_id: str, family: str, task: str) -> list[dict]:
        results = [r for r in self.family_record(run_id, family).get("results", []) if r.get("task") == task]
        if not results:
            raise Missing(f"{run_id} has no {task} results in its {family} record")
        return sorted(results, key=lambda r: r["seed"])

    def _seed_scores(self, result: dict, metric: str, eval_set: str, where: str, rerun: str) -> SeedScores:
        metrics = result.get("metrics", {})
        if not isinstance(metrics, dict):
            raise DataError(f"{where}: its metrics must be an object of metric values, got {type(metrics).__name__}; "
                            f"the file was edited or damaged: rerun its job ({rerun})")
        if metric not in metrics:
            raise Missing(f"{where} has no metric {metric}")
        value = _finite(metrics[metric], f"metric {metric}", where)
        per_example = result.get("per_example") or {}
        spec = (per_example.get("statistics") or {}).get(metric)
        if not spec:
            # Not recomputable: nothing stored determines this metric, so the stored value is used as is
            # and resampled at the seed level only.
            return SeedScores(seed=int(result["seed"]), value=value, eval_set=eval_set)
        statistic, roles = spec
        if statistic not in STATISTICS:
            raise LeanLMError(f"{where}: per_example statistic {statistic!r} of {metric} is unknown")
        examples = _examples(per_example, statistic, roles, metric, where)
        target, what = _per_example_target(result, metric, value)
        target = _finite(target, what, where)
        recomputed = recompute(statistic, examples)
        if not math.isclose(recomputed, target, rel_tol=RELATIVE_TOLERANCE, abs_tol=ABSOLUTE_TOLERANCE):
            raise DataError(
                f"{where}: {metric} recomputed from its per-example data is {recomputed!r}, but {what} is {target!r}: "
                f"the data or the metric was changed after its job wrote them, so a claim would resample data that "
                f"says something else than the metric it compares. Rerun the job ({rerun})")
        return SeedScores(seed=int(result["seed"]), value=value, statistic=statistic, examples=examples,
                          eval_set=eval_set)

    def measurement(self, run_id: str, family: str, task: str, metric: str) -> tuple[Measurement, str]:
        """The run's score on one task (every seed; per-example data where kept) and the metric resolved; where
        the profile pretrains the run several times (``pretrain_seeds``), every replica's, paired by their
        pretraining seeds (:class:`leanlm.claims.stats.Measurement`)."""
        results = self.task_results(run_id, family, task)
        name = resolve_metric(results, metric, task)
        replicas = self.replicas.get(run_id, [run_id])
        pretrained = []
        for replica in replicas:
            found = results if replica == run_id else self.task_results(replica, family, task)
            where = f"{self._path(replica, family)} task {task}"
            rerun = (f"`leanlm finetune --params {self.params_file} --run {replica} --family {family}`, or delete the "
                     "file and run snakemake")
            pretrained.append(tuple(self._seed_scores(r, name, f"{family}/{task}", f"{where} seed {r['seed']}", rerun)
                                    for r in found))
        seed_ids = [tuple(s.seed for s in seeds) for seeds in pretrained]
        if len(set(seed_ids)) > 1:
            raise Missing(f"the pretraining replicas of {run_id} on {task} have other fine-tuning seeds ("
                          + ", ".join(f"{r}: {list(ids)}" for r, ids in zip(replicas, seed_ids))
                          + "); rerun the ones that lack some")
        return Measurement(pretrained[0], replicas=tuple(pretrained[1:]),
                           pretrain_seeds=tuple(replica_seed(r) for r in replicas)), name

    def attention_parameters(self, run_id: str, family: str) -> int:
        """The attention parameter count the thesis uses for PEoP (Table 3.1's #params)."""
        return int(self.family_record(run_id, family)["parameters"]["attention"])

    def baseline_value(self, which: str, task: str, metric: str, family: str = "lm_eval", run_id: str | None = None) -> float:
        """A task's Rnd. Guess / Majority row: ch. 4's from results/<profile>/baselines/lm_eval.json; a
        fine-tuning family's Majority row from the dev labels ``run_id``'s evaluation kept
        (:meth:`majority_value`); fine-tuning families have no random-guess row."""
        if family != "lm_eval":
            if which != "majority" or run_id is None:
                raise Missing(f"{family} has no {which.replace('_', ' ')} row (only Majority, from a run's dev labels)")
            return self.majority_value(run_id, family, task, metric)
        path = paths.results_dir(self.profile) / "baselines" / "lm_eval.json"
        if not path.is_file():
            raise Missing(f"no baseline rows ({path}); the profile runs no lm_eval family")
        doc = read_record(path)
        self.checker.check_profile(doc, path)  # aggregation writes it from this profile's runs
        row = (doc.get("tasks") or {}).get(task)
        if row is None:
            raise Missing(f"no baseline row for task {task} in {path}")
        values = row.get(which) or {}
        if metric not in values:
            raise Missing(f"{task} has no {which.replace('_', ' ')} row for {metric} (the thesis prints none)")
        return _finite(values[metric], f"{which} {metric}", f"{path} task {task}")

    def _references(self, run_id: str, family: str, task: str, metric: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each seed's dev predictions and references of ``metric`` (checked by :meth:`measurement`)."""
        measurement, _ = self.measurement(run_id, family, task, metric)
        kept = [s.examples for s in measurement.seeds if s.examples is not None and "reference" in s.examples]
        if not kept:
            raise Missing(f"{self._path(run_id, family)} task {task} keeps no per-example predictions and references "
                          f"of {metric}, so its Majority row and whether its predictions vary cannot be computed")
        return [e["prediction"] for e in kept], [e["reference"] for e in kept]

    def keeps_labels(self, run_id: str, family: str, task: str, metric: str) -> bool:
        """Whether the run's ``task`` results keep per-example predictions and references of ``metric`` (what a
        Majority row and "its predictions vary" are computed from): MultiRC's grouped metrics keep none. Results
        that are absent or fail their checks (a missing replica, a record changed after its job) raise Missing:
        only a record that is there and holds no labels answers False."""
        results = self.task_results(run_id, family, task)
        measurement, _ = self.measurement(run_id, family, task, resolve_metric(results, metric, task))
        return any(s.examples is not None and "reference" in s.examples for s in measurement.seeds)

    def majority_value(self, run_id: str, family: str, task: str, metric: str) -> float:
        """The Majority row of a fine-tuning task (GLUE): always answering the dev set's most frequent label
        (a regression task: its median value), scored by the task's own metric function, on the references
        the run's evaluation kept: computed from the task's label distribution, never typed in. Constant
        predictions score 0 on correlations and Matthews (leanlm.evaluation.metrics)."""
        from leanlm.data.tasks import get_task
        from leanlm.evaluation.metrics import compute

        if metric in REGISTERED_IN:
            importlib.import_module(REGISTERED_IN[metric])
        _, references = self._references(run_id, family, task, metric)
        ref = references[0]  # the dev set: the same references for every seed
        if get_task(task).label_kind == "regression":
            answer = float(np.median(ref))
        else:
            values, counts = np.unique(ref, return_counts=True)
            answer = values[int(np.argmax(counts))]  # ties: the smallest label
        return float(compute(metric, np.full(len(ref), answer), ref))

    def constant_prediction(self, run_id: str, family: str, task: str, metric: str) -> float | None:
        """The one value the run predicts for every dev example of every seed of ``task``, or None where
        its predictions vary."""
        predictions, _ = self._references(run_id, family, task, metric)
        values = np.unique(np.concatenate(predictions))
        return float(values[0]) if len(values) == 1 else None
