"""Derived metrics: pure functions of scores and of the tidy results table.

The two efficiency metrics of §3.4.6:

- PRR (performance retention ratio): a model's score relative to the MHA upper bound, in percent
  as the thesis prints it (``SHA 96.7`` in Table 3.1).
- PEoP (performance elasticity of parameters): relative score gain over the SHA lower bound per
  relative parameter gain over SHA, as printed (``MHE-MUL 5.53``).

Both have an *inverse* form for metrics where lower is better (perplexity, Table 3.2).

The table helpers turn the tidy table of :mod:`leanlm.reporting.aggregate` (one row per run, task,
seed and metric) into per-run summaries: the seed-wise family average (e.g. GLUE Avg. = mean over
tasks of the primary metric x 100), then mean and standard deviation over seeds, as the thesis
reports "mean (std) over five runs". Metrics stored as fractions (accuracy, F1, BLEU / 100) are
shown x 100; metrics where lower is better (perplexity) are stored and shown as they are.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from leanlm.errors import LeanLMError

RUN_KEYS = ["experiment", "run", "run_id", "attention"]


def _scalar_or_array(value: np.ndarray):
    return float(value) if np.ndim(value) == 0 else value


def prr(score, score_mha, inverse: bool = False):
    """Performance retention ratio (%) of ``score`` relative to MHA's ``score_mha`` (§3.4.6).

    Direct: ``score / score_mha``; inverse (lower is better): ``1 - (score - score_mha) / score_mha``.
    Works on scalars and arrays alike.
    """
    s = np.asarray(score, dtype=float)
    ref = np.asarray(score_mha, dtype=float)
    ratio = 1.0 - (s - ref) / ref if inverse else s / ref
    return _scalar_or_array(100.0 * ratio)


def peop(score, score_sha, params, params_sha, inverse: bool = False):
    """Performance elasticity of parameters relative to SHA (§3.4.6).

    Direct: ``(score / score_sha - 1) / (params / params_sha - 1)``; the inverse form negates it. It is
    undefined (NaN; the thesis prints "-") where the model has exactly SHA's parameter count, SHA
    itself included.
    """
    s, ref = np.asarray(score, dtype=float), np.asarray(score_sha, dtype=float)
    growth = np.asarray(params, dtype=float) / np.asarray(params_sha, dtype=float) - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(growth == 0, np.nan, (s / ref - 1.0) / growth)
    return _scalar_or_array(-value if inverse else value)


def lower_is_better(metric: str) -> bool:
    """Whether lower values of ``metric`` are better (perplexity): PRR/PEoP then take the inverse forms.
    The directions are declared in :mod:`leanlm.evaluation.metrics`; an undeclared metric is a ConfigError."""
    # Imported here: the metrics module pulls in scikit-learn, which derived's users rarely need.
    from leanlm.evaluation.metrics import lower_is_better as declared

    return declared(metric)


def display_scale(metric: str) -> float:
    """Factor from a stored value to the printed one: x 100 for fractions, 1 for perplexities."""
    return 1.0 if lower_is_better(metric) else 100.0


def _scaled(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``value`` in printed units (see :func:`display_scale`)."""
    scale = rows["metric"].map({m: display_scale(m) for m in rows["metric"].unique()}).astype(float)
    return rows.assign(value=rows["value"] * scale)


def is_inverse(df: pd.DataFrame, family: str, tasks: Iterable[str] | None = None) -> bool:
    """Whether the primary metric of ``tasks`` in ``family`` is lower-is-better (one direction for all)."""
    rows = primary_rows(df, family)
    if tasks is not None:
        rows = rows[rows["task"].isin(list(tasks))]
    directions = {m: lower_is_better(m) for m in rows["metric"].unique()}
    if len(set(directions.values())) > 1:
        raise LeanLMError(
            f"family {family!r} mixes higher- and lower-is-better primary metrics ({', '.join(sorted(directions))}); "
            "average and compare them separately"
        )
    return bool(directions) and next(iter(directions.values()))


def primary_rows(df: pd.DataFrame, family: str) -> pd.DataFrame:
    """The rows of ``family`` that hold each task's primary metric (one per run, task and seed)."""
    rows = df[(df["family"] == family) & df["is_primary"].astype(bool)]
    if rows.empty:
        raise LeanLMError(
            f"no primary-metric results for task family {family!r} in the tidy table; "
            f"families present: {', '.join(sorted(df['family'].unique())) or 'none'}. "
            "Run the fine-tuning stage for it, then `leanlm aggregate`"
        )
    return rows


def seed_averages(df: pd.DataFrame, family: str, tasks: Iterable[str] | None = None) -> pd.DataFrame:
    """Per run and seed: the mean over ``tasks`` of the primary metric, in printed units (e.g. GLUE Avg.).

    ``tasks`` defaults to every task the run has in the family. A seed missing one of them would bias
    its average, so that is an error naming the run, seed and task.
    """
    rows = primary_rows(df, family)
    wanted = list(tasks) if tasks is not None else None
    if wanted is not None:
        rows = rows[rows["task"].isin(wanted)]
    missing = []
    for run_id, group in rows.groupby("run_id", sort=False):
        expected = set(wanted) if wanted is not None else set(group["task"])
        for seed, seed_rows in group.groupby("seed"):
            missing += [(run_id, seed, t) for t in sorted(expected - set(seed_rows["task"]))]
    if missing:
        listed = "; ".join(f"{r} seed {s} task {t}" for r, s, t in missing[:8])
        raise LeanLMError(
            f"family {family!r}: {len(missing)} (run, seed, task) results are missing ({listed}); "
            "rerun the fine-tuning job of those runs"
        )
    keys = RUN_KEYS + ["seed"]
    return _scaled(rows).groupby(keys, sort=False).agg(score=("value", "mean"), n_tasks=("task", "nunique")).reset_index()


def family_summary(df: pd.DataFrame, family: str, tasks: Iterable[str] | None = None) -> pd.DataFrame:
    """Per run: mean and sample std (ddof=1; NaN with one seed) over seeds of the seed-wise average.

    Columns: experiment, run, run_id, attention, mean, std, n_seeds, params_total, params_attention.
    """
    per_seed = seed_averages(df, family, tasks)
    summary = (
        per_seed.groupby(RUN_KEYS, sort=False)
        .agg(mean=("score", "mean"), std=("score", "std"), n_seeds=("seed", "nunique"))
        .reset_index()
    )
    params = df.groupby("run_id", sort=False)[["params_total", "params_attention"]].first()
    return summary.join(params, on="run_id")


def glue_average(df: pd.DataFrame, tasks: Iterable[str] | None = None) -> pd.DataFrame:
    """GLUE Avg. per run (Table 3.1): :func:`family_summary` of the ``glue`` family."""
    return family_summary(df, "glue", tasks)


def task_summary(df: pd.DataFrame, family: str) -> pd.DataFrame:
    """Per run and task: mean and sample std over seeds of the primary metric in printed units (Table 3.5)."""
    rows = _scaled(primary_rows(df, family))
    return (
        rows.groupby(RUN_KEYS + ["task"], sort=False)
        .agg(mean=("value", "mean"), std=("value", "std"), n_seeds=("seed", "nunique"))
        .reset_index()
    )


def with_efficiency(
    summary: pd.DataFrame,
    inverse: bool = False,
    mha: str = "mha",
    sha: str = "sha",
    params_column: str = "params_attention",
) -> pd.DataFrame:
    """Add ``prr`` and ``peop`` columns to the per-run summary of one experiment.

    The references are the runs *named* ``mha`` (PRR) and ``sha`` (PEoP) in the experiment matrix
    (by run name, not attention, so a larger MHA run such as Table 3.5's MHA(M) is never taken for
    the reference). The thesis counts attention parameters for PEoP (Table 3.1's #params: 8.85M for
    SHA, 28.32M for MHA). Where a reference run is absent the column is NaN (printed "-").
    """
    experiments = summary["experiment"].unique()
    if len(experiments) > 1:
        raise LeanLMError(
            f"PRR/PEoP compare runs of one experiment, but the summary mixes {', '.join(experiments)}; "
            "select one experiment first"
        )
    out = summary.copy()
    by_run = out.set_index("run")
    if mha in by_run.index:
        out["prr"] = prr(out["mean"].to_numpy(), float(by_run.loc[mha, "mean"]), inverse=inverse)
    else:
        out["prr"] = np.nan
    if sha in by_run.index:
        out["peop"] = peop(
            out["mean"].to_numpy(),
            float(by_run.loc[sha, "mean"]),
            out[params_column].to_numpy(),
            float(by_run.loc[sha, params_column]),
            inverse=inverse,
        )
    else:
        out["peop"] = np.nan
    return out
