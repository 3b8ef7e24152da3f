"""params/claims.yaml -> :class:`Claim` objects, validated against the schema and the experiment matrix.

A claim names runs, families, tasks and metrics; every name must exist in the experiment matrix
(params/experiments/*.yaml) and the task tables (params/tasks/*.yaml), whatever the profile runs, so a
typo fails when the file is read, naming the claim and the part, not as a silent "not run".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from leanlm import paths
from leanlm.config import load_matrix
from leanlm.schemas import read_params_yaml as _read_yaml
from leanlm.schemas import schema as _schema
from leanlm.schemas import validate as _validate
from leanlm.errors import ConfigError
from leanlm.fixed_files import files_fixed

EFFECTS = ("difference", "ratio", "factor")
# A part's side: what one of the two compared quantities is.
SIDE_KINDS = ("run", "prr", "peop", "baseline", "timing", "constant")
CONTEXT_METRIC = re.compile(r"^perplexity_ctx(\d+|@max|@min)$")


@dataclass(frozen=True)
class Side:
    kind: str                 # run | prr | peop | baseline | timing
    runs: tuple[str, ...]     # run: (run,); prr: (run, mha); peop: (run, sha); timing: (run,); baseline: ()
    metric: str | None = None  # a run side's own metric (else the part's)
    family: str | None = None
    baseline: str | None = None
    value: float | None = None  # constant: a fixed value in printed units

    @property
    def label(self) -> str:
        if self.kind == "run":
            return self.runs[0] + (f" [{self.metric}]" if self.metric else "")
        if self.kind == "prr":
            return f"PRR({self.runs[0]} / {self.runs[1]})"
        if self.kind == "peop":
            return f"PEoP({self.runs[0]} vs {self.runs[1]})"
        if self.kind == "timing":
            return f"pretraining ms/sample({self.runs[0]})"
        if self.kind == "constant":
            return f"{self.value:g}"
        return self.baseline.replace("_", " ")


@dataclass(frozen=True)
class Part:
    a: Side
    b: Side
    family: str
    tasks: Any                # "average", "each" or a tuple of task names
    metric: str               # "primary" or a metric name
    effect: str
    region: tuple[float, float]
    test: str
    margin: float | None
    thesis: tuple[float | None, float | None] | None
    conditions: tuple["Condition", ...] = ()  # what must hold before the part can be judged


@dataclass(frozen=True)
class Condition:
    """A precondition of a part (params/claims.yaml ``preconditions``): a comparison that must be supported
    at the profile, else the part is untestable there, for ``reason``."""

    name: str
    reason: str
    part: Part
    # compare: the part's comparison must be supported; varies: the predictions of the part's run (side a)
    # must take more than one value on each of its tasks (a model answering one class everywhere says
    # nothing of what the others learned)
    kind: str = "compare"


@dataclass(frozen=True)
class Claim:
    id: str
    chapter: int
    where: str
    quote: str
    note: str
    quantifier: str
    parts: tuple[Part, ...]

    @property
    def runs(self) -> set[str]:
        return {r for p in self.parts for side in (p.a, p.b) for r in side.runs}


def region_of(test: str, effect: str, margin: float | None) -> tuple[float, float]:
    """The effects a test allows (see params/claims.yaml): differences around 0, ratios around 1,
    factor effects (A - m B) above 0."""
    inf = math.inf
    if effect == "factor":
        if test != "better":
            raise ValueError("effect factor supports test better only (A more than margin times B)")
        return (0.0, inf)
    if effect == "ratio":
        m = 1.0 if margin is None else float(margin)
        if m <= 0:
            raise ValueError("a ratio's margin is a factor > 0")
        return {"better": (m, inf), "not_worse": (1 / m, inf), "equivalent": (1 / m, m),
                "worse": (0.0, 1 / m), "not_better": (0.0, m)}[test]
    m = 0.0 if margin is None else float(margin)
    return {"better": (m, inf), "not_worse": (-m, inf), "equivalent": (-m, m),
            "worse": (-inf, -m), "not_better": (-inf, m)}[test]


def _side(raw: Any) -> Side:
    if isinstance(raw, str):
        return Side("run", (raw,))
    if "run" in raw:
        return Side("run", (raw["run"],), metric=raw.get("metric"), family=raw.get("family"))
    if "prr" in raw:
        return Side("prr", tuple(raw["prr"]))
    if "peop" in raw:
        return Side("peop", (raw["peop"], raw["sha"]))
    if "timing" in raw:
        return Side("timing", (raw["timing"],))
    if "constant" in raw:
        return Side("constant", (), value=float(raw["constant"]))
    return Side("baseline", (), baseline=raw["baseline"])


def _part(claim: dict, raw: dict, thesis, where: str) -> Part:
    get = lambda key, default=None: raw.get(key, claim.get(key, default))  # noqa: E731
    family = get("family")
    if family is None:
        raise ConfigError(f"{where}: no family (set it on the claim or the part)")
    tasks = get("tasks", "average")
    effect, test, margin = get("effect", "difference"), get("test", "better"), get("margin")
    region = get("region")
    if region is not None:
        low, high = (-math.inf if region[0] is None else region[0]), (math.inf if region[1] is None else region[1])
        if not low < high:
            raise ConfigError(f"{where}: region {region} is empty")
        region = (float(low), float(high))
    else:
        try:
            region = region_of(test, effect, margin)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None
    return Part(a=_side(raw["a"]), b=_side(raw["b"]), family=family,
                tasks=tuple(tasks) if isinstance(tasks, list) else tasks, metric=get("metric", "primary"),
                effect=effect, region=region, test=test if raw.get("region", claim.get("region")) is None else "region",
                margin=margin, thesis=tuple(thesis) if thesis is not None else None)


EXPERIMENT = "{experiment}-"  # in a precondition's run ids: the guarded part's experiment (its first run's: A's, else B's)
EXPERIMENT_B = "{experiment_b}-"  # side B's first run's: a part comparing two experiments (sizes) guards both
PART_MARGIN = "{margin}"  # a precondition's margin: the guarded part's own (none: 0)


def _condition(name: str, raw: dict, guarded: Part, where: str) -> Condition:
    """Precondition ``name`` for the part ``guarded``: its family, tasks and metric default to the part's,
    ``{experiment}-<run>`` names a run of the part's experiment (side A's; ``{experiment_b}-<run>``: side B's)
    and ``margin: "{margin}"`` the part's own margin; ``varies: <run>`` asks that run's predictions to vary on
    each of the part's tasks."""
    runs = [r for side in (guarded.a, guarded.b) for r in side.runs]
    experiments = {EXPERIMENT: runs[0].split("-", 1)[0] if runs else None,
                   EXPERIMENT_B: guarded.b.runs[0].split("-", 1)[0] if guarded.b.runs else None}

    def place(side):
        if isinstance(side, str) or (isinstance(side, dict) and "run" in side):
            run = side if isinstance(side, str) else side["run"]
            for placeholder, experiment in experiments.items():
                if run.startswith(placeholder):
                    if experiment is None:
                        raise ConfigError(f"{where}: precondition {name} names {run!r}, but the part has no run "
                                          f"{'on side B ' if placeholder == EXPERIMENT_B else ''}to take the "
                                          f"experiment from")
                    run = experiment + "-" + run[len(placeholder):]
            return run if isinstance(side, str) else {**side, "run": run}
        return side

    # _part reads only the keys of a comparison: a precondition's reason and varies pass through unread
    defaults = {"family": guarded.family, "metric": guarded.metric, "tasks": guarded.tasks}
    body = dict(raw)  # a copy: the raw precondition is shared by every part that requires it
    reason = " ".join(raw["reason"].split())
    if "varies" in raw:
        run = place(raw["varies"])
        part = _part(defaults, {**body, "a": run, "b": run}, None, f"{where}, precondition {name}")
        return Condition(name=name, reason=reason, part=part, kind="varies")  # its part's test is not read
    if body.get("margin") == PART_MARGIN:
        body["margin"] = guarded.margin or 0.0
    part = _part(defaults, {**body, "a": place(raw["a"]), "b": place(raw["b"])}, None, f"{where}, precondition {name}")
    return Condition(name=name, reason=reason, part=part)


def _check_names(parts: Sequence[Part], wheres: Sequence[str], matrix: dict) -> None:
    """Every run, family, task and metric the parts (a claim's, or a precondition's comparison) name exists (the
    matrix and the task tables); ``wheres``: where each part is, for the errors."""
    from leanlm.data.tasks import get_task, task_names

    runs = {f"{e}-{r}": x for e, x in matrix.items() for r in x["runs"]}
    known_tasks = set(task_names())
    for part, where in zip(parts, wheres, strict=True):
        for side in (part.a, part.b):
            for run in side.runs:
                if run not in runs:
                    near = sorted(r for r in runs if r.split("-")[0] == run.split("-")[0])[:12]
                    raise ConfigError(f"{where}: unknown run {run!r}; runs of the experiment matrix "
                                      f"(params/experiments/*.yaml) are <experiment>-<run>, e.g. {', '.join(near or sorted(runs)[:5])}")
                family = side.family or part.family
                # finetune: required of every experiment (experiments.schema.json)
                if side.kind != "timing" and family not in runs[run]["finetune"]:
                    raise ConfigError(f"{where}: run {run} is not evaluated on family {family!r} (its families: "
                                      f"{', '.join(runs[run]['finetune'])})")
        if part.family == "pretrain":
            if {part.a.kind, part.b.kind} != {"timing"}:
                raise ConfigError(f"{where}: family pretrain compares timing sides only")
            continue
        if "timing" in (part.a.kind, part.b.kind):
            raise ConfigError(f"{where}: a timing side compares pretraining speed; give the part family pretrain "
                              f"(it has {part.family})")
        if isinstance(part.tasks, tuple):
            for task in part.tasks:
                if task not in known_tasks:
                    raise ConfigError(f"{where}: unknown task {task!r} (params/tasks/*.yaml)")
                spec = get_task(task)
                if spec.family != part.family:
                    raise ConfigError(f"{where}: task {task} belongs to family {spec.family}, not {part.family}")
                for metric in {part.metric, part.a.metric, part.b.metric} - {None, "primary"}:
                    if metric not in spec.metrics and not CONTEXT_METRIC.match(metric):
                        raise ConfigError(f"{where}: task {task} has no metric {metric!r} (its metrics: {', '.join(spec.metrics)})")


def load_claims(path: str | Path | None = None, matrix: dict | None = None) -> list[Claim]:
    """Read, validate and expand params/claims.yaml (``pairs`` become parts; part keys default to the
    claim's). A claim naming an unknown run, family, task or metric fails here. One pass over unchanging
    files (leanlm.fixed_files): the tasks are read once, not once per part."""
    with files_fixed():
        return _load_claims(path, matrix)


def _load_claims(path: str | Path | None, matrix: dict | None) -> list[Claim]:
    source = Path(path) if path else paths.params_dir() / "claims.yaml"
    raw = _read_yaml(source)
    _validate(raw, _schema("claims.schema.json"), source)
    matrix = matrix if matrix is not None else load_matrix()
    preconditions = raw.get("preconditions") or {}
    claims, seen = [], set()
    for entry in raw["claims"]:
        cid = entry["id"]
        if cid in seen:
            raise ConfigError(f"{source}: claim id {cid} appears twice")
        seen.add(cid)
        parts_raw = entry.get("parts") or [{"a": a, "b": b} for a, b in entry["pairs"]]
        thesis = entry.get("thesis")
        if thesis is not None and len(thesis) != len(parts_raw):
            raise ConfigError(f"{source}: claim {cid} has {len(parts_raw)} parts but {len(thesis)} thesis pairs; "
                              "give one [A, B] per part (null where the thesis prints none)")
        wheres = [f"{source}: claim {cid}, part {i + 1}" for i in range(len(parts_raw))]
        parts = tuple(_guarded(_part(entry, p, thesis[i] if thesis else None, where),
                               [*entry.get("requires", []), *p.get("requires", [])], preconditions, where)
                      for i, (p, where) in enumerate(zip(parts_raw, wheres)))
        claim = Claim(id=cid, chapter=entry["chapter"], where=entry["where"], quote=" ".join(entry["quote"].split()),
                      note=" ".join(entry.get("note", "").split()), quantifier=entry.get("quantifier", "every"),
                      parts=parts)
        _check_names(parts, wheres, matrix)
        for part, where in zip(parts, wheres):
            for cond in part.conditions:
                _check_names((cond.part,), [f"{where}, precondition {cond.name}"], matrix)
        claims.append(claim)
    return claims


def _guarded(part: Part, names: list[str], preconditions: dict, where: str) -> Part:
    """``part`` with the preconditions ``names`` (the claim's, then the part's own) attached."""
    conditions = []
    for name in dict.fromkeys(names):
        if name not in preconditions:
            raise ConfigError(f"{where}: requires {name!r}, which is not among the file's preconditions "
                              f"({', '.join(sorted(preconditions)) or 'none'})")
        conditions.append(_condition(name, preconditions[name], part, where))
    return replace(part, conditions=tuple(conditions))
