"""The speed claims' measurements (§2.5.3, Table 2.3): a run's pretraining time per sample from the
profile's speed record (rule ``pretraining_speed``, :mod:`leanlm.reporting.pretraining_speed`), never
from the training wall clock.

A run's measurement is the median over timing rounds of its milliseconds per sample (the sides' values a
report prints), with every round's value kept. Rounds are paired: in round r every model stepped on the same
batch size, in the same stretch of the machine's load (:mod:`leanlm.benchmarks.objective_speed`). So a
timing part's interval (:func:`rounds_interval`) is a paired t interval over the per-round effects, on the log
scale for a ratio. A percentile bootstrap over the 5-10 rounds a profile times cannot reach beyond the range of
the rounds: at a claim's Bonferroni level (99.5% for 10 parts) it was no wider than at 95% and covered a true
speed-up about 97% of the time with 5 rounds (tests/test_claims_review.py).
"""

from __future__ import annotations

import numpy as np

from leanlm.claims.results import Missing
from leanlm.claims.stats import Interval, Measurement, SeedScores
from leanlm.reporting.pretraining_speed import median_ms, read_speed, round_times, speed_path


def pretraining_speed(config: dict, run_id: str) -> Measurement:
    """``run_id``'s pretraining milliseconds per sample: the median over rounds, resampled over rounds.
    Missing where the profile has no speed record or the record did not time the run."""
    record = read_speed(config, required=False)
    path = speed_path(config["profile"])
    if record is None:
        raise Missing(f"no pretraining speed record ({path}; rule pretraining_speed)")
    times = round_times(record, run_id)
    if times is None:
        raise Missing(f"{path} did not time {run_id}")
    return Measurement((SeedScores(seed=0, value=median_ms(record, run_id), statistic="median",
                                   examples={"score": np.asarray(times, dtype=float)},
                                   eval_set=f"speed-rounds/{path.name}"),))


def rounds_interval(measurements: dict[str, Measurement], effect, level: float, ratio: bool = True) -> Interval:
    """A timing part's effect and its paired t interval at ``level`` over the rounds (R-1 degrees of freedom):
    ``effect`` (a vectorised function of the sides' values) on each round's times gives one effect per round;
    for a ``ratio`` their logs, whose mean and t bounds are exponentiated (the estimate is the geometric mean of
    the per-round ratios, the bounds symmetric on the log scale and above 0). Basis "rounds"; undefined where
    an effect is not finite (or not positive, for a ratio)."""
    from scipy import stats as sps

    per_round = {key: np.asarray(m.seeds[0].examples["score"], dtype=float) for key, m in measurements.items()}
    lengths = {len(times) for times in per_round.values()}
    if len(lengths) > 1:  # a caller's error: reading the speed record checks each run has its rounds
        raise ValueError("the timed runs of this part have different numbers of rounds ("
                         + ", ".join(f"{key.split('|')[0]} {len(times)}" for key, times in per_round.items())
                         + "); a speed record times every run in each round")
    effects = np.asarray(effect(per_round), dtype=float).reshape(-1)
    rounds = effects.size
    if rounds < 2 or not np.isfinite(effects).all() or (ratio and (effects <= 0).any()):
        return Interval(float("nan"), float("nan"), float("nan"), level, 0, "undefined", extra={"rounds": rounds})
    values = np.log(effects) if ratio else effects
    centre = float(values.mean())
    half = float(sps.t.ppf(0.5 + level / 2, rounds - 1) * values.std(ddof=1) / np.sqrt(rounds))
    bounds = (centre, centre - half, centre + half)
    estimate, low, high = (float(np.exp(v)) for v in bounds) if ratio else bounds
    return Interval(estimate, low, high, level, 0, "rounds", extra={"rounds": rounds})
