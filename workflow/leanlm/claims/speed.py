"""The speed claims' measurements (§2.5.3, Table 2.3): a run's pretraining time per sample from the
profile's speed record (rule ``pretraining_speed``, :mod:`leanlm.reporting.pretraining_speed`), never
from the training wall clock.

A run's measurement is the median over timing rounds of its milliseconds per sample, with every round's
value kept as per-example data: the claims' bootstrap resamples rounds, and since every timed run shares
one evaluation set (``speed-rounds/<record>``) of as many rounds, one draw takes the same rounds for both
sides of a part. Rounds are paired that way: in round r every model stepped on the same batch size, in
the same stretch of the machine's load (:mod:`leanlm.benchmarks.objective_speed`).
"""

from __future__ import annotations

import numpy as np

from leanlm.claims.results import Missing
from leanlm.claims.stats import Measurement, SeedScores
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

