"""Aggregation: the per-run results JSONs of a profile -> tidy tables, one per experiment
(results/<profile>/experiments/<experiment>.csv) and the whole profile's (results/<profile>/all_runs.csv).

One row per (run, task family, task, seed, metric), so every table of the thesis is a filter and a
group-by of the same frame. A further pretraining replica (profile key ``pretrain_seeds``) is a run of its
own, ``run_id`` <experiment>-<run>@p<seed> with its matrix run's ``run`` name, and column ``pretrain_seed``
holds the seed its model was pretrained with (0, :data:`leanlm.runs.PRETRAIN_SEED`, for every other run);
the tables read the first replica only (:func:`leanlm.reporting.render.render_table`). A table reads the pieces of its own experiments (params/tables.yaml's
``experiments`` and ``optional``), so rendering it waits for those runs only; all_runs.csv is the pieces
put together, plus the results on disk of experiments the run at hand does not include (a subset, a
shorter experiments list), so a run of part of the matrix keeps and reports the rest. Fine-tuning jobs write results/<profile>/runs/<run_id>/<family>.json;
pretraining summaries (pretrain.json) hold no task metrics and are skipped here.

A metric must be a finite number: a NaN left in the frame would silently drop out of every mean (GLUE's
average over the other tasks, PRR and PEoP with it), so one is refused, naming the file, task and seed.
Given the profile (``config``: the CLI always gives it), each record must also have been made with the
settings the profile gives now (:class:`leanlm.record_settings.RecordChecker`), and column
``settings_hash`` fingerprints them, so that ``leanlm render`` can tell a table aggregated under other
settings; without a profile the column is empty.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from leanlm import paths
from leanlm.errors import DataError, LeanLMError
from leanlm.io import atomic_path
from leanlm.record_settings import RecordChecker, read_record
from leanlm.runs import replica_seed

log = logging.getLogger(__name__)

COLUMNS = [
    "profile", "experiment", "run", "run_id", "family", "backbone", "attention", "embedding", "layout",
    "n_layers", "n_decoder_layers", "d_model", "n_heads", "head_dim", "task", "seed", "pretrain_seed", "metric", "value",
    "is_primary", "params_total", "params_attention", "params_embedding", "settings_hash",
]
# Model settings copied into every row (tables group and label by them); defaults for old files.
MODEL_COLUMNS = {"backbone": "bert", "embedding": "standard", "layout": "uniform", "n_layers": 0,
                 "n_decoder_layers": 0, "d_model": 0, "n_heads": 0, "head_dim": 0}
SKIPPED = {"pretrain.json"}


def _require(obj: dict, key: str, where: str, path: Path) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise LeanLMError(
            f"{path}: results JSON has no key {where}{key}; the file is incomplete or from an older "
            "version: rerun the job that wrote it"
        )
    return obj[key]


def _attention_name(model: dict, path: Path) -> str:
    attention = _require(model, "attention", "model.", path)
    # A per-layer pattern (ch. 4) may be a dict; keep its name so the column stays a plain string.
    if isinstance(attention, dict):
        return str(attention.get("name") or json.dumps(attention, sort_keys=True))
    return str(attention)


def _integer(value: Any, key: str, path: Path) -> int:
    # JSON has one number type: 3.0 is an integer, True (a bool is an int to Python) and "3" are not.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise DataError(f"{path}: key {key} = {value!r} is not an integer; the file was edited or damaged: "
                        "delete it and rerun the job that wrote it")
    return int(value)


def _metric(value: Any, where: str, path: Path) -> float:
    """A metric's value: a finite number, or a DataError naming the file, task, seed and metric."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{path}: {where} = {value!r} is not a number; the file was edited or damaged (every "
                        "runner writes numbers): delete it and rerun the job that wrote it")
    if not math.isfinite(value):
        raise DataError(
            f"{path}: {where} = {value!r} is not a finite number: its evaluation failed (a model that diverged, "
            "or a task with nothing to score), and averaged it would silently drop out of every mean. Find the "
            f"cause in the job's log (logs/{path.parents[2].name}/finetune/{path.parent.name}/{path.stem}.log) and "
            "rerun the job")
    return float(value)


def rows_from_file(path: Path, profile: str, checker: RecordChecker | None = None) -> list[dict]:
    """The tidy rows of one fine-tuning results JSON (see the module docstring for the layout); with
    ``checker``, the record is first checked against its profile's settings."""
    doc = read_record(path)
    if doc.get("profile", profile) != profile:
        raise LeanLMError(
            f"{path}: written by profile {doc['profile']!r} but found under results/{profile}/; "
            "results of different profiles must not be mixed"
        )
    settings = checker.family(doc, path) if checker is not None else ""
    params = _require(doc, "parameters", "", path)
    model = _require(doc, "model", "", path)
    base = {
        **{k: model.get(k, default) for k, default in MODEL_COLUMNS.items()},
        "profile": profile,
        "experiment": _require(doc, "experiment", "", path),
        "run": _require(doc, "run", "", path),
        "run_id": _require(doc, "run_id", "", path),
        # the seed the model was pretrained with: 0, or a further replica's (<experiment>-<run>@p<seed>); a
        # replica's `run` is its matrix run's name, so the claims and readers group replicas by (run, pretrain_seed)
        "pretrain_seed": replica_seed(str(doc["run_id"])),
        "family": _require(doc, "family", "", path),
        "attention": _attention_name(model, path),
        "params_total": _integer(_require(params, "total", "parameters.", path), "parameters.total", path),
        "params_attention": _integer(_require(params, "attention", "parameters.", path), "parameters.attention", path),
        "params_embedding": _integer(_require(params, "embedding", "parameters.", path), "parameters.embedding", path),
        "settings_hash": settings,
    }
    results = _require(doc, "results", "", path)
    if not isinstance(results, list) or not results:
        raise LeanLMError(f"{path}: key results must be a non-empty list of per-task, per-seed results")
    rows = []
    for i, result in enumerate(results):
        where = f"results[{i}]."
        metrics = _require(result, "metrics", where, path)
        primary = _require(result, "primary_metric", where, path)
        if not isinstance(metrics, dict):
            raise DataError(f"{path}: {where}metrics must be an object of metric: value, got {metrics!r:.80}; "
                            "the file was edited or damaged: delete it and rerun the job that wrote it")
        if primary not in metrics:
            raise LeanLMError(f"{path}: {where}primary_metric {primary!r} is not among its metrics {sorted(metrics)}")
        task = _require(result, "task", where, path)
        seed = _integer(_require(result, "seed", where, path), f"{where}seed", path)
        for metric, value in metrics.items():
            rows.append(
                {
                    **base,
                    "task": task,
                    "seed": seed,
                    "metric": metric,
                    "value": _metric(value, f"{where}metrics.{metric} (task {task!r}, seed {seed})", path),
                    "is_primary": metric == primary,
                }
            )
    return rows


def result_files(profile: str) -> list[Path]:
    """Every fine-tuning results JSON of ``profile``, sorted (pretraining summaries excluded)."""
    runs = paths.results_dir(profile) / "runs"
    return sorted(p for p in runs.glob("*/*.json") if p.name not in SKIPPED)


def experiment_files(profile: str, experiment: str) -> list[Path]:
    """The fine-tuning results JSONs of ``experiment``'s runs, sorted: a run id is ``<experiment>-<run>``, and
    an experiment's name has no ``-`` (workflow/schemas/experiments.schema.json)."""
    return [p for p in result_files(profile) if p.parent.name.startswith(f"{experiment}-")]


def piece_path(profile: str, experiment: str) -> Path:
    """results/<profile>/experiments/<experiment>.csv: the tidy rows of one experiment."""
    return paths.results_dir(profile) / "experiments" / f"{experiment}.csv"


def aggregate(profile: str, config: dict | None = None, experiment: str | None = None) -> pd.DataFrame:
    """Read every results/<profile>/runs/*/*.json (``experiment``: only that experiment's) into one tidy
    DataFrame with :data:`COLUMNS`; with the profile's ``config``, each record checked against its settings
    (see the module docstring)."""
    files = result_files(profile) if experiment is None else experiment_files(profile, experiment)
    if not files:
        runs = paths.results_dir(profile) / "runs"
        raise LeanLMError(
            f"no fine-tuning results under {runs}/{experiment + '-*' if experiment else '<run_id>'}/<family>.json; "
            "run the fine-tuning stage first (snakemake, or `leanlm finetune --run ... --family ...`)"
        )
    return _tidy(profile, files, config)


def _tidy(profile: str, files: list[Path], config: dict | None) -> pd.DataFrame:
    checker = RecordChecker(config) if config is not None else None
    rows = [row for path in files for row in rows_from_file(path, profile, checker)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    duplicated = df.duplicated(["run_id", "family", "task", "seed", "metric"])
    if duplicated.any():
        first = df[duplicated].iloc[0]
        raise LeanLMError(
            f"results/{profile}/runs: run {first.run_id} has task {first.task!r} seed {first.seed} metric "
            f"{first.metric!r} more than once (two families or files report it); keep one"
        )
    return df.sort_values(["experiment", "run_id", "family", "task", "seed", "metric"], kind="stable").reset_index(
        drop=True
    )


def _write(frame: pd.DataFrame, out: Path) -> Path:
    with atomic_path(out, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False)
    log.info("aggregated %d rows from %d runs into %s", len(frame), frame["run_id"].nunique(), out)
    return out


def write_piece(profile: str, experiment: str, config: dict | None = None) -> Path:
    """Write results/<profile>/experiments/<experiment>.csv atomically and return its path."""
    if config is not None and experiment not in config["experiments"]:
        raise LeanLMError(f"aggregate: profile {profile!r} ({config.get('_params_file', 'its params file')}) does not "
                          f"run experiment {experiment!r}; it runs {', '.join(config['experiments'])}")
    return _write(aggregate(profile, config, experiment), piece_path(profile, experiment))


def combine(profile: str, config: dict | None = None, experiments: list[str] | None = None) -> Path:
    """Write results/<profile>/all_runs.csv from the pieces of ``experiments`` (default: ``config``'s), with
    the results on disk of the other experiments aggregated beside them, and return its path.

    The pieces are joined as text, in experiment order: every piece is sorted as the whole frame is (by
    experiment first), so the file is byte for byte what aggregating every run at once writes."""
    ours = sorted(experiments if experiments is not None else config["experiments"])
    missing = [str(piece_path(profile, e)) for e in ours if not piece_path(profile, e).is_file()]
    if missing:
        params = (config or {}).get("_params_file", "PARAMS")
        raise LeanLMError(f"{', '.join(missing)} missing: aggregate each experiment first (`leanlm aggregate "
                          f"--params {params} --experiment NAME`, or snakemake)")
    bodies = {e: piece_path(profile, e).read_text(encoding="utf-8").split("\n", 1)[1] for e in ours}
    rest = [p for p in result_files(profile) if p.parent.name.split("-", 1)[0] not in ours]
    if rest:  # kept from earlier runs: a run of part of the matrix reports them too
        frame = _tidy(profile, rest, config)
        for experiment, rows in frame.groupby("experiment", sort=False):
            bodies[experiment] = rows.to_csv(index=False).split("\n", 1)[1]
    if not any(bodies.values()):
        raise LeanLMError(f"no fine-tuning results under {paths.results_dir(profile) / 'runs'}; run the "
                          "fine-tuning stage first (snakemake, or `leanlm finetune --run ... --family ...`)")
    out = paths.results_dir(profile) / "all_runs.csv"
    header = pd.DataFrame(columns=COLUMNS).to_csv(index=False)
    with atomic_path(out, suffix=".csv") as tmp:
        Path(tmp).write_text(header + "".join(bodies[e] for e in sorted(bodies)), encoding="utf-8")
    log.info("put together %d experiments' results into %s", len(bodies), out)
    return out


def collect_baselines(profile: str, experiment: str | None = None) -> Path | None:
    """Ch. 4's Rnd. Guess / Majority rows, which the lm_eval runs record: results/<profile>/baselines/
    (:func:`leanlm.lm_eval.baselines.collect_baselines`)."""
    from leanlm.lm_eval.baselines import collect_baselines as collect

    return collect(profile, experiment)


def main(profile: str, config: dict | None = None) -> Path:
    """By hand (``leanlm aggregate`` alone): every piece of ``config``'s experiments (and its lm_eval
    baselines), all_runs.csv and the whole profile's lm_eval baselines; return all_runs.csv's path. Without
    ``config``: the experiments of the results on disk, unchecked (see :func:`aggregate`)."""
    on_disk = sorted({p.parent.name.split("-", 1)[0] for p in result_files(profile)})
    listed = config["experiments"] if config is not None else on_disk
    done = [e for e in listed if e in on_disk]  # an experiment not run yet has no piece (its tables say so)
    for experiment in done:
        write_piece(profile, experiment, config)
        collect_baselines(profile, experiment)
    out = combine(profile, config, done)
    collect_baselines(profile)
    return out


DTYPES = {"task": str, "metric": str, "run": str, "run_id": str, "settings_hash": str}


def load(profile: str, experiments: list[str] | None = None) -> pd.DataFrame:
    """Read results/<profile>/all_runs.csv, or only the pieces of ``experiments`` (written by
    :func:`write_piece`; none: an empty frame)."""
    if experiments is None:
        path = paths.results_dir(profile) / "all_runs.csv"
        if not path.is_file():
            raise LeanLMError(f"{path} does not exist; run `leanlm aggregate` (or snakemake) first")
        return pd.read_csv(path, dtype=DTYPES)
    frames = []
    for experiment in experiments:
        path = piece_path(profile, experiment)
        if not path.is_file():
            raise LeanLMError(f"{path} does not exist; run `leanlm aggregate --experiment {experiment}` (or "
                              "snakemake, which aggregates each experiment after its runs) first")
        frames.append(pd.read_csv(path, dtype=DTYPES))
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)
