"""The statistics behind a claim's verdict: a paired bootstrap over evaluation examples and seeds.

Pure functions of numpy arrays; nothing here knows about runs, files or the thesis.

A *measurement* is one score of one model on one task: the mean over fine-tuning seeds of a metric
computed on the evaluation examples. Each seed's evaluation is a :class:`SeedScores`: the per-example
data the metric is a function of (correctness, predictions and references, log-likelihoods and token
counts) or, where a result file kept no per-example data, only the seed's value.

One bootstrap draw resamples, with replacement,

- the evaluation examples of each evaluation set (one index vector per set, shared by every model
  evaluated on that set: the comparison is *paired* over examples), and
- the seeds (one draw per list of seed ids, shared by every model fine-tuned with those seeds: paired
  over seeds, since seed s of model A and seed s of model B saw the same data order),

recomputes every measurement on the draw, and applies the claim's effect function. The 95% interval
is the 2.5 and 97.5 percentiles of the effect over the draws (Efron's percentile interval).

Where a model was pretrained several times (profile key ``pretrain_seeds``), a draw is hierarchical:
pretraining seeds first, then fine-tuning seeds, then examples, paired across models at every level, and
the pretraining seeds' share of the spread is widened for their few units (:mod:`leanlm.claims.hierarchical`).
A model pretrained once contributes no pretraining variance: its draws are those above, number for number,
and its interval says ``pretraining_runs`` 1 (the report: "one pretraining run").

Where no measurement kept per-example data, only seeds vary: the interval is then a paired t
interval over the per-seed effects (:func:`seed_t_interval`), since a percentile bootstrap over the
2-5 seeds a profile runs is far too narrow. Where a measurement has neither per-example data nor
two seeds, nothing varies: its interval has no width, and :func:`verdict` calls the claim
inconclusive, since no uncertainty was measured (``basis`` says ``none``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from leanlm.claims.draw_statistics import (BLEU_FIELDS, FIELDS, PAIR_FIELDS, STATISTICS,  # noqa: F401
                                           _ranks_rows)
from leanlm.claims.hierarchical import expansion, replica_t_bounds, replicated_draws, widened  # noqa: F401

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_RUN = "supported", "contradicted", "inconclusive", "not run"
# A part this scale cannot judge: its precondition does not hold (e.g. every model at chance), or its
# interval has no width although something was resampled (every draw gives the same effect: no evidence).
UNTESTABLE = "untestable"
DEFAULT_DRAWS = 2000
LEVEL = 0.95
# A percentile interval at a high level (a claim of many parts, :func:`simultaneous_level`) needs draws
# beyond each of its ends: at least this many in each tail (:func:`draws_for`).
TAIL_DRAWS = 5


def simultaneous_level(parts: int, level: float = LEVEL) -> float:
    """The level of each part's interval so that a claim of ``parts`` parts errs with probability at most
    1 - ``level`` in all (Bonferroni): the parts' intervals then hold simultaneously, so a claim that holds
    is contradicted by some part (under "every") no more than 5% of the time, not 1 - 0.975**k (about 1 in
    3 for 16 parts on their regions' boundary)."""
    return 1 - (1 - level) / max(parts, 1)


def draws_for(level: float, draws: int = DEFAULT_DRAWS) -> int:
    """``draws``, or more where the interval's tails at ``level`` would hold fewer than :data:`TAIL_DRAWS`."""
    tail = (1 - level) / 2
    return max(int(draws), int(np.ceil(TAIL_DRAWS / tail - 1e-9)))


# The per-example statistics live in leanlm.claims.draw_statistics (re-exported: callers name them here).


@dataclass(frozen=True)
class SeedScores:
    """One seed's evaluation of one measurement: its value and, where kept, its per-example data.

    ``examples`` maps field names to equal-length arrays (see :data:`FIELDS`; the recomputed metrics
    take ``prediction`` and ``reference``); ``statistic`` names the function of them that gives
    ``value`` (a key of :data:`STATISTICS`); ``eval_set`` names the evaluation set, so that models
    evaluated on the same set share the example draw.
    """

    seed: int
    value: float
    statistic: str | None = None
    examples: Mapping[str, np.ndarray] | None = None
    eval_set: str | None = None

    def __post_init__(self):
        if self.examples is None:
            return
        if self.statistic not in STATISTICS:
            raise ValueError(f"unknown per-example statistic {self.statistic!r}; known: {', '.join(STATISTICS)}")
        need = FIELDS.get(self.statistic, PAIR_FIELDS)
        missing = [f for f in need if f not in self.examples]
        if missing:
            raise ValueError(f"per-example data for statistic {self.statistic!r} lacks {missing}")
        lengths = {len(np.asarray(self.examples[f])) for f in need}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"per-example arrays of {self.statistic!r} must be non-empty and of one length, got {lengths}")

    @property
    def n_examples(self) -> int:
        return 0 if self.examples is None else len(next(iter(self.examples.values())))

    def on(self, idx: np.ndarray) -> np.ndarray:
        """The statistic on each row of ``idx`` (draws, n); the seed's value where there are no examples."""
        if self.examples is None:
            return np.full(idx.shape[0], self.value, dtype=float)
        data = {k: np.asarray(v) for k, v in self.examples.items()}
        return np.asarray(STATISTICS[self.statistic](data, idx), dtype=float)


@dataclass(frozen=True)
class Measurement:
    """One model's score on one evaluation: the mean over its seeds (and over its pretraining replicas).

    ``seeds``: the fine-tuning seeds of the model pretrained with the first pretraining seed; ``replicas``:
    those of its further pretraining replicas (the same fine-tuning seeds each), and ``pretrain_seeds`` the
    pretraining seed of each (first one's first), which pairs the replicas of different models."""

    seeds: tuple[SeedScores, ...]
    replicas: tuple[tuple[SeedScores, ...], ...] = ()
    pretrain_seeds: tuple[int, ...] = (0,)

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("a measurement needs at least one seed")
        if len(self.pretrain_seeds) != 1 + len(self.replicas) or len(set(self.pretrain_seeds)) != len(self.pretrain_seeds):
            raise ValueError(f"{1 + len(self.replicas)} pretraining replicas need as many distinct pretraining seeds, "
                             f"got {self.pretrain_seeds}")
        for seed, replica in zip(self.pretrain_seeds[1:], self.replicas):
            if tuple(s.seed for s in replica) != self.seed_ids:
                raise ValueError(f"the replica pretrained with seed {seed} has fine-tuning seeds "
                                 f"{tuple(s.seed for s in replica)}, the first {self.seed_ids}: replicas are "
                                 "fine-tuned alike")

    @property
    def pretrained(self) -> tuple[tuple[SeedScores, ...], ...]:
        """Every pretraining replica's seeds, the first replica's first."""
        return (self.seeds, *self.replicas)

    @property
    def value(self) -> float:
        return float(np.mean([np.mean([s.value for s in seeds]) for seeds in self.pretrained]))

    @property
    def seed_ids(self) -> tuple[int, ...]:
        return tuple(s.seed for s in self.seeds)

    @property
    def per_example(self) -> bool:
        return all(s.examples is not None for seeds in self.pretrained for s in seeds)


@dataclass(frozen=True)
class Interval:
    """A bootstrap estimate: the observed effect, its interval and what was resampled."""

    estimate: float
    low: float
    high: float
    level: float
    draws: int
    basis: str  # "examples+seeds", "examples", "seeds" or "none" (nothing to resample); "pretraining+..." too
    extra: dict = field(default_factory=dict)
    # the fewest pretraining runs of a compared model: 1 where some model was pretrained once, whose
    # pretraining variance the interval then does not cover
    pretraining_runs: int = 1

    @property
    def width(self) -> float:
        return self.high - self.low


def pretraining_runs(measurements: Sequence[Measurement]) -> int:
    """The fewest pretraining replicas among ``measurements`` (1: some model was pretrained once)."""
    return min((len(m.pretrained) for m in measurements), default=1)


def basis_of(measurements: Sequence[Measurement]) -> str:
    """What a bootstrap over these measurements resamples: examples, seeds, both, or nothing; and
    "pretraining+" before it where every model has several pretraining replicas."""
    inner = _inner_basis(measurements)
    if pretraining_runs(measurements) < 2:
        return inner
    return "pretraining" if inner == "none" else f"pretraining+{inner}"


def _inner_basis(measurements: Sequence[Measurement]) -> str:
    examples = all(m.per_example for m in measurements)
    seeds = all(len(m.seeds) >= 2 for m in measurements)
    if examples and seeds:
        return "examples+seeds"
    if examples:
        return "examples"
    if seeds:
        return "seeds"
    return "none"


def measurement_draws(measurements: Mapping[str, Measurement], draws: int, rng: np.random.Generator,
                      observed: bool = False, only: str | None = None) -> dict[str, np.ndarray]:
    """Every measurement recomputed on ``draws`` paired bootstrap draws (or once, observed, when
    ``observed``): ``{key: array (draws,)}``. Example indices are shared per evaluation set (when the
    sets have the same length), seed draws per list of seed ids, pretraining-seed draws per list of
    pretraining seeds. ``only``: for models of several pretraining replicas, resample one level alone
    ("pretraining" seeds or "examples"), to tell the variance each adds."""
    example_idx: dict[tuple, np.ndarray] = {}
    seed_pos: dict[tuple, np.ndarray] = {}
    pretrain_pos: dict[tuple, np.ndarray] = {}
    out = {}
    for key in sorted(measurements):
        m = measurements[key]
        if m.replicas:
            out[key] = replicated_draws(key, m, draws, rng, observed, only, example_idx, seed_pos, pretrain_pos)
            continue
        k = len(m.seeds)
        if observed:
            pos = np.tile(np.arange(k), (1, 1))
        else:
            pos = seed_pos.setdefault(m.seed_ids, rng.integers(0, k, size=(draws, k)))
        per_seed = []
        for s in m.seeds:
            n = max(s.n_examples, 1)
            if observed:
                idx = np.arange(n)[None, :]
            else:
                idx = example_idx.setdefault((s.eval_set or key, n), rng.integers(0, n, size=(draws, n)))
            per_seed.append(s.on(idx))
        values = np.stack(per_seed)  # (k, draws)
        out[key] = np.take_along_axis(values, pos.T, axis=0).mean(axis=0)
    return out


def paired_bootstrap(measurements: Mapping[str, Measurement],
                     effect: Callable[[Mapping[str, np.ndarray]], np.ndarray],
                     draws: int = DEFAULT_DRAWS, level: float = LEVEL, seed: int = 0, ratio: bool = False) -> Interval:
    """The effect of the measurements (a vectorised function of their draws) with its percentile
    interval at ``level`` over ``draws`` paired bootstrap draws (see the module docstring). ``ratio``: the
    effect is a ratio (positive), whose widening for few pretraining seeds is made on its log scale."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    estimate = float(np.asarray(effect(measurement_draws(measurements, 1, rng, observed=True)))[0])
    basis = basis_of(list(measurements.values()))
    runs = pretraining_runs(list(measurements.values()))
    no_examples = not any(s.examples is not None for m in measurements.values() for seeds in m.pretrained for s in seeds)
    if basis in ("seeds", "pretraining+seeds", "pretraining") and no_examples:
        seeds_t = (pretraining_t_interval(measurements, effect, estimate, level) if runs >= 2 else
                   seed_t_interval(measurements, effect, estimate, level))
        if seeds_t is not None:
            return seeds_t
    samples = _effect_draws(measurements, effect, draws, rng, None)
    finite = samples[np.isfinite(samples)]
    if finite.size < 0.9 * draws or not np.isfinite(estimate):
        return Interval(estimate, float("nan"), float("nan"), level, draws, "undefined", pretraining_runs=runs)
    alpha = (1 - level) / 2
    low, high = np.quantile(finite, [alpha, 1 - alpha])
    if runs >= 2:  # widened for the few pretraining seeds (leanlm.claims.hierarchical)
        # a ratio on its log scale, where a multiplicative spread is symmetric and the bounds stay above 0
        log = ratio and estimate > 0 and low > 0 and bool((finite > 0).all())
        scale = np.log if log else (lambda x: x)
        spread = float(np.var(scale(finite)))
        low, high = widened(float(scale(estimate)), float(scale(low)), float(scale(high)), spread,
                            _variance(measurements, effect, draws, seed, "pretraining", scale),
                            _variance(measurements, effect, draws, seed, "examples", scale), runs, level)
        if log:
            low, high = np.exp(low), np.exp(high)
    return Interval(estimate, float(low), float(high), level, draws, basis, pretraining_runs=runs)


def _variance(measurements: Mapping[str, Measurement], effect, draws: int, seed: int, only: str,
              scale: Callable[[np.ndarray], np.ndarray]) -> float:
    """The variance of the effect (on ``scale``: its log for a ratio) over draws that resample level ``only``
    alone."""
    values = _effect_draws(measurements, effect, draws, np.random.default_rng(seed), only)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = scale(values[np.isfinite(values)])
    values = values[np.isfinite(values)]
    return float(np.var(values)) if values.size else float("nan")


def _effect_draws(measurements: Mapping[str, Measurement], effect, draws: int, rng: np.random.Generator,
                  only: str | None) -> np.ndarray:
    """The effect on ``draws`` bootstrap draws, in chunks of at most DEFAULT_DRAWS (each chunk pairs its own
    draws), so that the many draws of a high level do not hold every index matrix at once."""
    chunks = [min(DEFAULT_DRAWS, draws - start) for start in range(0, draws, DEFAULT_DRAWS)]
    return np.concatenate([np.asarray(effect(measurement_draws(measurements, n, rng, only=only)),
                                      dtype=float).reshape(-1) for n in chunks])


def pretraining_t_interval(measurements: Mapping[str, Measurement], effect, estimate: float,
                           level: float) -> Interval | None:
    """Seed-level data of models pretrained several times: a paired t interval over the per-replica effects
    (each from its measurements' means over fine-tuning seeds). None when the models do not share one list
    of pretraining seeds."""
    seed_lists = {m.pretrain_seeds for m in measurements.values()}
    if len(seed_lists) != 1:
        return None
    runs = len(next(iter(seed_lists)))
    per_replica = np.array([float(np.asarray(effect({key: np.array([np.mean([s.value for s in m.pretrained[r]])])
                                                     for key, m in measurements.items()}))[0]) for r in range(runs)])
    if not np.isfinite(per_replica).all():
        return Interval(estimate, float("nan"), float("nan"), level, 0, "undefined", pretraining_runs=runs)
    low, high = replica_t_bounds(per_replica, estimate, level)
    return Interval(estimate, low, high, level, 0, basis_of(list(measurements.values())), pretraining_runs=runs)


def seed_t_interval(measurements: Mapping[str, Measurement], effect, estimate: float, level: float) -> Interval | None:
    """Seed-level data only (no per-example data kept): a paired t interval over the per-seed effects,
    which, unlike a percentile bootstrap over 2-5 seeds, widens as it should when seeds are few.
    None when the measurements do not share one list of seeds (then the bootstrap pairs what it can)."""
    from scipy import stats as sps

    seed_lists = {m.seed_ids for m in measurements.values()}
    if len(seed_lists) != 1:
        return None
    k = len(next(iter(seed_lists)))
    per_seed = np.array([float(np.asarray(effect({key: np.array([m.seeds[j].value]) for key, m in measurements.items()}))[0])
                         for j in range(k)])
    if not np.isfinite(per_seed).all():
        return Interval(estimate, float("nan"), float("nan"), level, 0, "undefined")
    half = sps.t.ppf(0.5 + level / 2, k - 1) * per_seed.std(ddof=1) / np.sqrt(k)
    return Interval(estimate, float(estimate - half), float(estimate + half), level, 0, "seeds")


def degenerate(interval: Interval) -> bool:
    """Whether something was resampled and yet every draw gave the same effect (a zero-width interval):
    e.g. two models that score 0 on every example. Such an interval decides nothing."""
    if interval.basis in ("none", "undefined") or not np.isfinite([interval.low, interval.high]).all():
        return False
    return interval.width <= 1e-12 * max(1.0, abs(interval.estimate))


def verdict(interval: Interval, region: tuple[float, float]) -> str:
    """Supported when the whole interval lies in the claim's region of effects (low, high), contradicted
    when none of it does, inconclusive otherwise or when nothing was resampled (DESIGN.md §8); untestable
    when the interval is degenerate (:func:`degenerate`)."""
    low, high = region
    if interval.basis in ("none", "undefined") or not np.isfinite([interval.low, interval.high]).all():
        return INCONCLUSIVE
    if degenerate(interval):
        return UNTESTABLE
    if interval.low > low and interval.high < high:
        return SUPPORTED
    if interval.high <= low or interval.low >= high:
        return CONTRADICTED
    return INCONCLUSIVE


def combine(verdicts: Sequence[str], quantifier: str) -> str:
    """One verdict from the verdicts of a claim's parts.

    ``every``: supported when every part is, contradicted when any part is. ``most``: supported when
    more than half the parts are, contradicted when at least half are (then "most" cannot hold).
    Parts not run are left out; a claim none of whose parts ran is not run. An untestable part counts
    neither way: it keeps "every" from being supported and counts against a majority, but contradicts
    nothing; a claim whose run parts are all untestable is untestable.
    """
    parts = [v for v in verdicts if v != NOT_RUN]
    if not parts:
        return NOT_RUN
    if all(v == UNTESTABLE for v in parts):
        return UNTESTABLE
    n_sup, n_con = parts.count(SUPPORTED), parts.count(CONTRADICTED)
    if quantifier == "every":
        if n_con:
            return CONTRADICTED
        return SUPPORTED if n_sup == len(parts) else INCONCLUSIVE
    if quantifier == "most":
        if n_sup * 2 > len(parts):
            return SUPPORTED
        if n_con * 2 >= len(parts):
            return CONTRADICTED
        return INCONCLUSIVE
    raise ValueError(f"unknown quantifier {quantifier!r}; known: every, most")
