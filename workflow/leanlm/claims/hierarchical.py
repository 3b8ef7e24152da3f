"""The hierarchical bootstrap of models pretrained several times (profile key ``pretrain_seeds``), for
:mod:`leanlm.claims.stats`.

Where a model was pretrained several times (profile key ``pretrain_seeds``: each replica fine-tuned with
the same seeds and evaluated on the same sets), a draw is *hierarchical*: it first resamples the
pretraining seeds (one draw per list of pretraining seeds, shared by every model pretrained with them:
replica k of A is paired with replica k of B), then, within each drawn replica, the fine-tuning seeds
(paired as above), and the evaluation examples once per set (they are crossed with every seed). With 2-5
pretraining seeds a percentile interval is too narrow: a bootstrap over R units has (R-1)/R of the
variance of their mean, and takes z where t with R-1 degrees of freedom is due. So the interval's spread is
set from two further passes over the same draws, each resampling one level alone: the pretraining seeds
(whose replicas' means carry everything nested in them: fine-tuning seeds and each model's own noise on
the examples), widened by sqrt(R/(R-1)) t_{R-1}/z (:func:`expansion`: Hesterberg's expanded percentile
interval, 2015, "What teachers should know about the bootstrap", applied to the one level drawn from few
units), and the examples (crossed with every replica, so absent from the replicas' spread); the
hierarchical draws' percentile interval is scaled about the estimate to that spread, never narrowed (:func:`widened`;
a ratio on its log scale, so its bounds stay above 0).
Without pretraining variance the interval is thus about as wide as a t interval over R replicas makes it,
not a multiple of the flat one. Seed-level data alone (no per-example data): a paired t interval over the
replicas' effects (:func:`replica_t_bounds`). tests/test_claims_pretraining.py checks the coverage on
simulated data.
"""

from __future__ import annotations

import numpy as np


def expansion(runs: int, level: float) -> float:
    """How much wider than its bootstrap spread the pretraining seeds' part of an interval is made when
    ``runs`` of them were drawn: sqrt(R/(R-1)) t_{R-1}/z at ``level`` (see the module docstring)."""
    from scipy import stats as sps

    q = 0.5 + level / 2
    return float(np.sqrt(runs / (runs - 1)) * sps.t.ppf(q, runs - 1) / sps.norm.ppf(q))


def replicated_draws(key: str, m, draws: int, rng: np.random.Generator, observed: bool,
                      only: str | None, example_idx: dict, seed_pos: dict, pretrain_pos: dict) -> np.ndarray:
    """A measurement of several pretraining replicas on the draws (see the module docstring): R slots, each
    a drawn replica whose fine-tuning seeds are drawn in turn (slot j's draw shared by every model: paired),
    on the draw's examples; the mean over the slots. ``only``: resample that level alone ("pretraining" or
    "examples"), the others kept in place."""
    replicas, k = len(m.pretrained), len(m.seeds)
    if observed:
        return np.array([m.value])
    order = pretrain_pos.setdefault(m.pretrain_seeds, rng.integers(0, replicas, size=(draws, replicas)))
    if only == "examples":
        order = np.broadcast_to(np.arange(replicas), (draws, replicas))

    def on(s) -> np.ndarray:
        n = max(s.n_examples, 1)
        if only == "pretraining":
            return np.broadcast_to(s.on(np.arange(n)[None, :]), (draws,))
        return s.on(example_idx.setdefault((s.eval_set or key, n), rng.integers(0, n, size=(draws, n))))

    values = np.stack([np.stack([on(s) for s in seeds]) for seeds in m.pretrained])  # (replicas, k, draws)
    column = np.arange(draws)[:, None]
    total = np.zeros(draws)
    for slot in range(replicas):
        # slot 0 shares its seed draw with the models pretrained once (paired with them as before)
        pos = seed_pos.setdefault(m.seed_ids if slot == 0 else (m.seed_ids, slot), rng.integers(0, k, size=(draws, k)))
        if only is not None:
            pos = np.broadcast_to(np.arange(k), (draws, k))
        total += values[order[:, slot][:, None], pos, column].mean(axis=1)
    return total / replicas


def widened(estimate: float, low: float, high: float, total: float, pretraining: float, examples: float, runs: int,
            level: float) -> tuple[float, float]:
    """The percentile interval (low, high) of hierarchical draws of variance ``total``, scaled about
    ``estimate`` to the spread of the pretraining seeds' variance (``pretraining``, resampled alone) widened
    by :func:`expansion` plus the examples' (``examples``, resampled alone); never narrowed: where that spread is
    the smaller (the replicas' means average out fine-tuning noise the hierarchical draws keep), the
    hierarchical draws' own interval stands. All on the effect's scale (a ratio's log: the caller's)."""
    wanted = expansion(runs, level) ** 2 * pretraining + examples
    if not total > 0 or not np.isfinite(wanted):
        return low, high
    widen = max(1.0, float(np.sqrt(wanted / total)))
    # each end only ever moves outwards: with an estimate outside (low, high) (a skewed effect), scaling its
    # distance from the estimate would pull that end in
    return min(low, estimate - widen * (estimate - low)), max(high, estimate + widen * (high - estimate))


def replica_t_bounds(per_replica: np.ndarray, estimate: float, level: float) -> tuple[float, float]:
    """A t interval at ``level`` about ``estimate`` from the per-replica effects (R-1 degrees of freedom)."""
    from scipy import stats as sps

    runs = len(per_replica)
    half = sps.t.ppf(0.5 + level / 2, runs - 1) * per_replica.std(ddof=1) / np.sqrt(runs)
    return float(estimate - half), float(estimate + half)
