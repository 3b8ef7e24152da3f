"""Each claim of params/claims.yaml -> its effect, 95% interval and verdict at one profile.

A part compares side A with side B on one benchmark: every measurement it needs (run x task x metric)
is read with its seeds and per-example data, the effect ("how much better A is than B", see
params/claims.yaml) is computed on paired bootstrap draws (:mod:`leanlm.claims.stats`), and the
verdict follows from where the interval lies relative to the claim's region of effects. A part whose
runs the profile does not run, or whose results are absent, is "not run" with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from leanlm.claims import results as res
from leanlm.claims.spec import Claim, Part, Side
from leanlm.claims.speed import pretraining_speed, rounds_interval
from leanlm.claims.stats import (CONTRADICTED, DEFAULT_DRAWS, INCONCLUSIVE, LEVEL, NOT_RUN, SUPPORTED, UNTESTABLE, Interval,
                                 Measurement, combine, degenerate, draws_for, paired_bootstrap, simultaneous_level,
                                 verdict)
from leanlm.reporting.derived import display_scale, lower_is_better, peop, prr

log = logging.getLogger(__name__)


@dataclass
class PartResult:
    part: Part
    label: str
    verdict: str
    interval: Interval | None = None
    a: float | None = None
    b: float | None = None
    reason: str = ""
    checked: list[str] = field(default_factory=list)  # each precondition and how it came out


@dataclass
class ClaimResult:
    claim: Claim
    verdict: str
    parts: list[PartResult] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.parts:
            out[p.verdict] = out.get(p.verdict, 0) + 1
        return out


class _Sides:
    """Builds a part's measurements and the vectorised function from their draws to each side."""

    def __init__(self, results: res.Results, part: Part, tasks: list[str]):
        self.results, self.part, self.tasks = results, part, tasks
        self.measurements: dict[str, Measurement] = {}

    def _run_score(self, run_id: str, family: str, metric: str):
        """Mean over the part's tasks of the run's (scaled) score: a function of the draws, and the
        metric's direction."""
        keys, directions = [], set()
        for task in self.tasks:
            m, name = self.results.measurement(run_id, family, task, metric)
            key = f"{run_id}|{family}|{task}|{name}"
            self.measurements[key] = m
            keys.append((key, display_scale(name)))
            directions.add(lower_is_better(name))
        if len(directions) > 1:
            raise res.Missing(f"the tasks of {family} mix higher- and lower-is-better metrics; average one kind")
        return (lambda d: np.mean([d[k] * s for k, s in keys], axis=0)), directions.pop()

    def side(self, side: Side):
        family = side.family or self.part.family
        metric = side.metric or self.part.metric
        if side.kind == "run":
            return self._run_score(side.runs[0], family, metric)
        if side.kind == "prr":  # derived's formulas give floats (an array over the draws, a float for one)
            (fa, lower), (fb, _) = self._run_score(side.runs[0], family, metric), self._run_score(side.runs[1], family, metric)
            return (lambda d: np.asarray(prr(fa(d), fb(d), inverse=lower))), False
        if side.kind == "peop":
            (fa, lower), (fb, _) = self._run_score(side.runs[0], family, metric), self._run_score(side.runs[1], family, metric)
            pa = self.results.attention_parameters(side.runs[0], family)
            pb = self.results.attention_parameters(side.runs[1], family)
            return (lambda d: np.asarray(peop(fa(d), fb(d), pa, pb, inverse=lower))), False
        # A constant or a baseline row is one value, broadcast against the other side's draws.
        if side.kind == "constant":  # printed units, like the scaled scores; its direction is the other side's
            return (lambda d: np.full(1, side.value)), None
        if side.kind == "timing":  # the speed record's rounds (leanlm.claims.speed), not the training clock
            key = f"{side.runs[0]}|speed"
            self.measurements[key] = pretraining_speed(self.results.config, side.runs[0])
            return (lambda d: d[key]), True  # ms per sample, lower is better
        values, lowers = [], set()
        for task in self.tasks:
            results = self.results.task_results(self._any_run(), family, task)
            name = res.resolve_metric(results, metric, task)
            row = self.results.baseline_value(side.baseline, task, name, family=family, run_id=self._any_run())
            values.append(row * display_scale(name))
            lowers.add(lower_is_better(name))
        constant = float(np.mean(values))
        return (lambda d: np.full(1, constant)), lowers.pop()

    def _any_run(self) -> str:
        for side in (self.part.a, self.part.b):
            if side.runs:
                return side.runs[0]
        raise res.Missing("a part needs at least one run")


def _effect(part: Part, fa, fb, lower: bool):
    m = 1.0 if part.margin is None else float(part.margin)

    def effect(d):
        a, b = fa(d), fb(d)
        if part.effect == "ratio":
            with np.errstate(divide="ignore", invalid="ignore"):
                return b / a if lower else a / b
        if part.effect == "factor":
            return b - m * a if lower else a - m * b
        return b - a if lower else a - b
    return effect


def part_tasks(part: Part, config: dict) -> list[str]:
    if part.family == "pretrain":
        return []
    if part.tasks in ("average", "each"):
        block = config["finetune"].get(part.family)  # the schema requires the finetune mapping
        if block is None:
            raise res.Missing(f"the profile has no finetune.{part.family} block")
        return list(block["tasks"])
    return list(part.tasks)


def _families_not_run(part: Part, profile_runs: Mapping[str, frozenset[str]] | set[str]) -> list[str]:
    """``run on family`` for each fine-tuning result the part reads that the profile does not make: a
    subset may run a model without some of its families. A bare set of run ids says nothing of families."""
    if not isinstance(profile_runs, Mapping):
        return []
    # timing sides only in family pretrain parts (leanlm.claims.spec), which read no fine-tuning result; a
    # baseline side reads no run
    return sorted({f"{r} on {family}" for side in (part.a, part.b) for family in [side.family or part.family]
                   if family != "pretrain" for r in side.runs if family not in profile_runs[r]})


def not_run_reason(part: Part, config: dict, profile_runs: Mapping[str, frozenset[str]] | set[str]) -> str:
    """Why the profile does not run the part (runs or families it leaves out), or "" where it does: known
    from the profile alone, before any result is read."""
    # a subset narrows the profile's experiments, runs and families: say so, as the whole profile may run them
    subset = f" (subset {config['subset']})" if config.get("subset") else ""
    # each run once: a `varies` precondition reads one run, its side A and B alike
    absent = sorted({r for side in (part.a, part.b) for r in side.runs if r not in profile_runs})
    if absent:
        return f"not run at this profile{subset}: {', '.join(absent)}"
    # never a result left on disk by another run of the profile: only what this one makes
    unrun = _families_not_run(part, profile_runs)
    if unrun:
        return f"not run at this profile{subset}: {', '.join(unrun)}"
    return ""


def evaluate_part(part: Part, config: dict, profile_runs: Mapping[str, frozenset[str]] | set[str],
                  tasks: list[str] | None = None, draws: int = DEFAULT_DRAWS, seed: int = 0,
                  results: res.Results | None = None, memo: dict | None = None, level: float = LEVEL) -> PartResult:
    """``profile_runs``: the profile's runs, each with the fine-tuning families it runs (or a set of ids);
    ``results``: the profile's results reader (one per evaluation, so each record is checked once);
    ``memo``: precondition results already computed (shared by the parts of one evaluation); ``level``:
    the level of the part's interval (a claim's parts share its error rate: :func:`stats.simultaneous_level`;
    preconditions are judged at 95% each)."""
    label = f"{part.a.label} vs {part.b.label}" + _where(part, tasks)
    why = not_run_reason(part, config, profile_runs)
    if why:
        return PartResult(part, label, NOT_RUN, reason=why)
    results = results if results is not None else res.Results(config)
    checked, unmet = [], None
    for cond in part.conditions:
        held = _precondition(cond, part, config, profile_runs, tasks, draws, results, memo)
        basis = _summary(held) if held.interval else held.reason  # a result without an interval says why
        checked.append(f"{cond.name}: {held.verdict} ({basis})")
        if held.verdict != SUPPORTED and unmet is None:
            unmet = (f"untestable at this scale: {cond.reason} Precondition {cond.name} ({held.label}) is "
                     f"{held.verdict}: {basis}")
    if unmet:
        return PartResult(part, label, UNTESTABLE, reason=unmet, checked=checked)
    try:
        tasks = tasks if tasks is not None else part_tasks(part, config)
        sides = _Sides(results, part, tasks)
        fa, lower_a = sides.side(part.a)
        fb, lower_b = sides.side(part.b)
    except res.Missing as why:
        return PartResult(part, label, NOT_RUN, reason=str(why), checked=checked)
    if lower_a is not None and lower_b is not None and lower_a != lower_b:
        raise ValueError(f"{label}: the two sides have opposite directions (one lower-is-better)")
    lower = lower_a if lower_a is not None else bool(lower_b)
    effect = _effect(part, fa, fb, lower)
    if part.family == "pretrain":  # timing parts: paired over rounds (leanlm.claims.speed)
        interval = rounds_interval(sides.measurements, effect, level, ratio=part.effect == "ratio")
    else:
        interval = paired_bootstrap(sides.measurements, effect, draws=draws_for(level, draws), level=level, seed=seed,
                                    ratio=part.effect == "ratio")
    observed = {k: np.array([m.value]) for k, m in sides.measurements.items()}
    a, b = float(fa(observed)[0]), float(fb(observed)[0])
    outcome = verdict(interval, part.region)
    reason = ("untestable at this scale: every resample gives the same effect (a zero-width interval, e.g. both "
              "sides score 0 on every example), which is no evidence either way") if degenerate(interval) else ""
    return PartResult(part, label, outcome, interval, a, b, reason=reason, checked=checked)


def _where(part: Part, tasks: list[str] | None) -> str:
    """" on <family>" and the tasks the part reads, where it names them (two lm parts differ only there)."""
    if part.family == "pretrain":
        return ""
    named = tasks if tasks is not None else (list(part.tasks) if isinstance(part.tasks, tuple) else None)
    return f" on {part.family}" + (f" ({', '.join(named)})" if named else "")


def _summary(result: PartResult) -> str:
    iv = result.interval
    return f"effect {iv.estimate:.4g} [{iv.low:.4g}, {iv.high:.4g}] ({iv.basis}), allowed {result.part.region}"


def _precondition(cond, guarded: Part, config: dict, profile_runs, tasks, draws: int,
                  results: res.Results, memo: dict | None) -> PartResult:
    """The precondition's own verdict for the guarded part (with the part's tasks where it takes them)."""
    own = cond.part
    same_tasks = own.tasks == guarded.tasks
    key = (cond.name, own, tuple(tasks) if (same_tasks and tasks is not None) else None)
    if memo is not None and key in memo:
        return memo[key]
    own_tasks = _labelled_tasks(cond, own, config, tasks if same_tasks else None, results)
    if cond.kind == "varies":
        held = _predictions_vary(own, config, profile_runs, own_tasks, results)
    else:
        # evaluate_part's fixed seed: the same draws whichever part asks (memo or not)
        held = evaluate_part(own, config, profile_runs, own_tasks, draws=draws, results=results)
    if memo is not None:
        memo[key] = held
    return held


def _labelled_tasks(cond, own: Part, config: dict, tasks: list[str] | None, results: res.Results) -> list[str] | None:
    """The tasks a precondition that reads dev labels (a Majority row, or "predictions vary") is judged on: those
    of ``tasks`` (None: the part's own) whose results keep per-example labels, where some do not (MultiRC's grouped
    metrics keep none, so a SUPERGLUE average has no Majority row): the reference must be above Majority on the
    tasks where Majority exists. The tasks unchanged where every task keeps labels, none does, or the run has no
    results yet (the precondition then says why it is not run)."""
    family = own.a.family or own.family
    reads_labels = cond.kind == "varies" or any(side.kind == "baseline" for side in (own.a, own.b))
    # lm_eval records keep no dev labels (a baseline there is the task's own); a pretraining part has no tasks
    if not reads_labels or family == "lm_eval" or not own.a.runs:
        return tasks
    try:
        wanted = tasks if tasks is not None else part_tasks(own, config)
        kept = [task for task in wanted if results.keeps_labels(own.a.runs[0], family, task, own.a.metric or own.metric)]
    except res.Missing:
        return tasks
    return kept if kept and len(kept) < len(wanted) else tasks


def _predictions_vary(part: Part, config: dict, profile_runs, tasks: list[str] | None,
                      results: res.Results) -> PartResult:
    """Supported when the run's dev predictions take more than one value on each task the part reads;
    contradicted, naming the tasks and the value, where it answers one value for every example of every
    seed (a model at chance whatever its score: comparisons against it carry no information)."""
    run = part.a.runs[0]
    label = f"{run}'s predictions" + _where(part, tasks)
    why = not_run_reason(part, config, profile_runs)
    if why:
        return PartResult(part, label, NOT_RUN, reason=why)
    try:
        tasks = tasks if tasks is not None else part_tasks(part, config)
        constant = {}
        for task in tasks:
            value = results.constant_prediction(run, part.family, task,
                                                res.resolve_metric(results.task_results(run, part.family, task),
                                                                   part.metric, task))
            if value is not None:
                constant[task] = value
    except res.Missing as why:
        return PartResult(part, label, NOT_RUN, reason=str(why))
    if constant:
        listed = ", ".join(f"{task} (always {value:g})" for task, value in constant.items())
        return PartResult(part, label, CONTRADICTED, reason=f"{run} predicts one value for every example of {listed}")
    return PartResult(part, label, SUPPORTED, reason=f"{run}'s predictions vary on every task")


def evaluate_claim(claim: Claim, config: dict, profile_runs: Mapping[str, frozenset[str]] | set[str],
                   draws: int = DEFAULT_DRAWS, reader: res.Results | None = None, memo: dict | None = None) -> ClaimResult:
    """Every part of the claim (``tasks: each`` gives one per task) and the claim's verdict. The parts the
    profile runs share the claim's 5% error: each part's interval is a simultaneous one, at level
    1 - 0.05/k over those k parts (Bonferroni, :func:`stats.simultaneous_level`), so that a claim that holds
    is contradicted by one of its parts no more often than 5%. k is known from the profile alone, before
    any result is read; parts untestable at this scale still count in it."""
    reader = reader if reader is not None else res.Results(config)
    memo = memo if memo is not None else {}
    results: list[PartResult | None] = []
    planned: list[tuple[int, int, Part, list[str] | None]] = []  # (slot, part index, part, tasks)
    for i, part in enumerate(claim.parts):
        if part.tasks == "each":
            try:
                tasks = part_tasks(part, config)
            except res.Missing as why:
                results.append(PartResult(part, f"{part.a.label} vs {part.b.label}", NOT_RUN, reason=str(why)))
                continue
            for task in tasks:
                planned.append((len(results), i, part, [task]))
                results.append(None)
        else:
            planned.append((len(results), i, part, None))
            results.append(None)
    level = simultaneous_level(sum(not not_run_reason(part, config, profile_runs) for _, _, part, _ in planned))
    for slot, i, part, tasks in planned:
        results[slot] = evaluate_part(part, config, profile_runs, tasks, draws=draws, seed=i,
                                      results=reader, memo=memo, level=level)
    # every claim has a part and `each` at least one task (the schemas): combine never sees an empty list
    return ClaimResult(claim, combine([r.verdict for r in results], claim.quantifier), results)
