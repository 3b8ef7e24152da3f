"""Load and validate a profile (params/<profile>.yaml) and the experiment matrix (params/experiments/).

Validation happens before any job runs (the Snakefile calls :func:`load_config` at parse time, and so
does every ``leanlm`` subcommand): an unknown key, an unknown variant name or a wrong type fails with a
message naming the file, the key and the allowed values; so do a key written twice or a byte that is not
UTF-8 (with the line: :func:`leanlm.io.read_yaml`), a warm-up longer than training, a pretraining or
fine-tuning sequence longer than the model's positions, and a file other than params/<profile>.yaml (the file DVC's data stages read).

The resolved config is the profile dict plus the keys the loader adds:

- ``_params_file``: the path it was read from (rules pass it on to ``leanlm`` commands);
- ``_matrix``: the experiment families the profile selects, from ``params/experiments/*.yaml``;
- ``absent_runs``: ``{run_id: reason}`` of the matrix runs this profile cannot run.

The checks across the profile, the matrix, the model library and the task table (a variant the model
library lacks, a sequence longer than the model's positions, named pretraining data a run cannot read,
...) live in :mod:`leanlm.profile_checks`, called at the end of :func:`load_config`; this module itself
only reads and schema-validates files.

Resolving that matrix into runs (:class:`~leanlm.runs.Run`, :func:`~leanlm.runs.runs`,
:func:`~leanlm.runs.get_run`, the settings a run trains with) is :mod:`leanlm.runs`' job; the cross-file
checks import it, it never imports this module.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from leanlm import paths
from leanlm.errors import ConfigError
from leanlm.fixed_files import files_fixed
from leanlm.runs import FAMILY_READING_OBJECTIVES, PRETRAIN_SEED, absent_runs, evaluated_run_id
from leanlm.schemas import read_params_yaml as _read_yaml
from leanlm.schemas import schema as _schema
from leanlm.schemas import validate as _validate


@lru_cache(maxsize=8)
def _load_matrix_cached(directory: str) -> dict:
    matrix: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    schema = _schema("experiments.schema.json")
    for path in sorted(Path(directory).glob("*.yaml")):
        doc = _read_yaml(path) or {}
        _validate(doc, schema, path)
        for name, experiment in doc.items():
            if name in matrix:
                raise ConfigError(f"{path}: experiment {name!r} is already defined in {origin[name]}")
            matrix[name] = experiment
            origin[name] = path
    return matrix


def load_matrix(directory: Path | None = None) -> dict:
    """Every experiment family of every params/experiments/*.yaml file, validated."""
    return _load_matrix_cached(str(directory or paths.params_dir() / "experiments"))


def load_config(params_file: str | Path | None = None, subset: str | None = None) -> dict:
    """Read, validate and resolve a profile. ``None`` means the default profile, params/smoke.yaml.
    ``subset`` names one of the profile's ``subsets``: the profile's settings, only those experiments (and,
    where the subset says so, only some of an experiment's fine-tuning families).

    One pass over unchanging files (:func:`leanlm.fixed_files.files_fixed`): the checks of every run ask the
    file system the same questions, answered once per call."""
    with files_fixed():
        return _load_config(params_file, subset)


def _load_config(params_file: str | Path | None, subset: str | None) -> dict:
    path = Path(params_file) if params_file else paths.params_dir() / "smoke.yaml"
    if not path.is_absolute():
        path = paths.project_root() / path
    config = _read_yaml(path)
    _validate(config, _schema("params.schema.json"), path)
    _check_profile_file(config, path)
    matrix = load_matrix()
    listed = list(config["experiments"])  # the whole profile's, which a subset narrows
    narrowing = _select_subset(config, subset, path, matrix)
    _check_pretrain_seeds(config, path, matrix, listed)
    config["_params_file"] = str(path)
    config["_matrix"] = {}
    for name in config["experiments"]:
        if name not in matrix:
            raise ConfigError(
                f"{path}: key experiments lists {name!r}, which no params/experiments/*.yaml defines; "
                f"known: {', '.join(sorted(matrix))}"
            )
        config["_matrix"][name] = matrix[name]
        if name in narrowing:  # a subset's {experiment: {runs, families}}: fewer runs or fewer fine-tuning jobs
            keep = narrowing[name]
            if keep["families"] is not None:
                config["_matrix"][name] = _narrowed(config["_matrix"][name], keep["families"])
            if keep["runs"] is not None:
                config["_matrix"][name] = _with_runs(config["_matrix"][name], keep["runs"])
            if keep["replicas"] is not None:  # read by leanlm.runs.runs: only these runs get further replicas
                config["_matrix"][name] = {**config["_matrix"][name], "_replicas": list(keep["replicas"])}
    from leanlm.profile_checks import check_combinations  # the checks that need the model library and tasks

    check_combinations(config, path)
    config["absent_runs"] = absent_runs(config)
    return config


def _narrowed(experiment: dict, keep: list[str]) -> dict:
    """The experiment with only the fine-tuning families ``keep``, in the matrix's order (code that takes
    a run's first family of a kind, as the translation objective does, sees what the whole profile sees),
    and only the fine-tuning variants of those families."""
    variants = {f: v for f, v in experiment.get("finetune_variants", {}).items() if f in keep}
    narrowed = {**experiment, "finetune": [f for f in experiment["finetune"] if f in keep]}
    if "finetune_variants" in experiment:
        narrowed["finetune_variants"] = variants
    return narrowed


def _with_runs(experiment: dict, keep: list[str]) -> dict:
    """The experiment with only the runs ``keep``, in the matrix's order (each run unchanged)."""
    return {**experiment, "runs": {n: r for n, r in experiment["runs"].items() if n in keep}}


def _subset_items(items: list, where: str) -> dict[str, dict | None]:
    """A subset's items as {experiment: None for all of it, or {"families": [...] or None, "runs": [...] or
    None}}. An item is a name, {experiment: [families]} or {experiment: {runs: [...], families: [...]}}; an
    experiment named twice (as a name and as a mapping, or in two mappings) is refused rather than one of
    them silently winning."""
    out: dict[str, dict | None] = {}
    for item in items:
        for name, keep in ({item: None} if isinstance(item, str) else item).items():
            if name in out:
                raise ConfigError(f"{where} names experiment {name} twice; name it once, with the fine-tuning "
                                  f"families it keeps ({{{name}: [...]}}) or alone for all of them")
            if keep is None:
                out[name] = None
            elif isinstance(keep, dict):
                out[name] = {k: None if keep.get(k) is None else list(keep[k]) for k in ("families", "runs", "replicas")}
            else:
                out[name] = {"families": list(keep), "runs": None, "replicas": None}
    return out


def _evaluated_runs(name: str, experiment: dict) -> dict[str, str]:
    """{run name: the run id whose model it evaluates} of experiment ``name``'s runs that evaluate another
    run's model, resolved as the run builder resolves them (:func:`leanlm.runs.evaluated_run_id`)."""
    defaults = experiment.get("defaults", {})
    out = {}
    for run_name, run in experiment["runs"].items():
        target = evaluated_run_id(name, {**defaults, **(run or {})}.get("evaluate_from", ""))
        if target:
            out[run_name] = target
    return out


def _check_subset(name: str, chosen: dict, path: Path, matrix: dict) -> None:
    """Each narrowed experiment keeps families and runs it has; a translation experiment keeps its families."""
    for experiment, keep in chosen.items():
        if keep is None:
            continue
        families, kept_runs = keep["families"], keep["runs"]
        objective = (matrix.get(experiment) or {}).get("objective")
        if families is not None and objective in FAMILY_READING_OBJECTIVES:
            raise ConfigError(f"{path}: subsets.{name} narrows {experiment}'s fine-tuning families, but its "
                              f"objective {objective!r} pretrains on a task of those families; name the "
                              f"experiment whole")
        known = (matrix.get(experiment) or {}).get("finetune", [])
        unknown = [f for f in families or [] if f not in known]
        if unknown:
            raise ConfigError(f"{path}: subsets.{name} keeps {experiment}'s fine-tuning families "
                              f"{', '.join(unknown)}, which the experiment does not have (it has: "
                              f"{', '.join(known) or 'none'}): a subset only narrows them")
        known_runs = list((matrix.get(experiment) or {}).get("runs", {}))
        unknown = [r for r in kept_runs or [] if r not in known_runs]
        if unknown:
            raise ConfigError(f"{path}: subsets.{name} keeps {experiment}'s runs {', '.join(unknown)}, which the "
                              f"experiment does not have (it has: {', '.join(known_runs) or 'none'}): a subset "
                              f"only narrows them")
        outside = [r for r in keep["replicas"] or [] if r not in (kept_runs or known_runs)]
        if outside:
            raise ConfigError(f"{path}: subsets.{name} keeps the pretraining replicas of {experiment}'s runs "
                              f"{', '.join(outside)}, which it does not run (it runs: "
                              f"{', '.join(kept_runs or known_runs)})")


def _check_subset_replicas(name: str, chosen: dict, path: Path, pretrain_seeds: dict | None) -> None:
    """A subset's ``replicas`` keeps some of the further pretraining replicas ``pretrain_seeds`` makes: on an
    experiment pretrained once it would keep nothing and silently mean nothing, so it is refused."""
    listed = (pretrain_seeds or {}).get("experiments", [])
    for experiment, keep in chosen.items():
        if keep is None or keep["replicas"] is None or experiment in listed:
            continue
        why = "pretrain_seeds.experiments does not list it" if pretrain_seeds else "the profile has no pretrain_seeds"
        raise ConfigError(f"{path}: subsets.{name} sets replicas for {experiment}, whose runs are pretrained once "
                          f"({why}), so it has no further replicas to keep: drop `replicas` from the subset's "
                          f"{experiment}, or list {experiment} in pretrain_seeds.experiments")


def _check_subset_targets(name: str, chosen: dict, path: Path, matrix: dict) -> None:
    """A run the subset keeps that evaluates another's model (ch. 4 skip) keeps that model, and if it keeps
    its own replicas, that model's replicas (which its replicas evaluate)."""
    kept = _kept_run_ids(chosen, matrix)
    for experiment in chosen:
        if experiment not in matrix:  # load_config names the unknown experiment
            continue
        for run_name, target in _evaluated_runs(experiment, matrix[experiment]).items():
            run_id = f"{experiment}-{run_name}"
            if run_id not in kept:
                continue
            if target not in kept:
                raise ConfigError(f"{path}: subsets.{name} keeps {run_id}, which evaluates the model of {target}, and "
                                  f"leaves that run out: keep {target} as well")
            target_experiment, _, target_run = target.partition("-")
            if _keeps_replicas(chosen, experiment, run_name) and not _keeps_replicas(chosen, target_experiment, target_run):
                raise ConfigError(f"{path}: subsets.{name} keeps the pretraining replicas of {run_id}, which evaluate "
                                  f"{target}'s replicas, but not those of {target}: keep them too")


def _kept_run_ids(chosen: dict, matrix: dict) -> set[str]:
    return {f"{e}-{r}" for e, keep in chosen.items() for r in (matrix.get(e) or {}).get("runs", {})
            if keep is None or keep["runs"] is None or r in keep["runs"]}


def _keeps_replicas(chosen: dict, experiment: str, run: str) -> bool:
    keep = chosen.get(experiment)
    return keep is None or keep["replicas"] is None or run in keep["replicas"]


def _select_subset(config: dict, subset: str | None, path: Path, matrix: dict) -> dict[str, dict]:
    """Check every named subset, chosen or not (a broken one fails now, not when someone first chooses it),
    and narrow ``experiments`` to ``subset`` when one is named; return what the subset keeps of the
    experiments it narrows ({experiment: {"families": ..., "runs": ..., "replicas": ...}}, None for all).
    A subset changes which jobs a profile runs, never a setting: each job it runs is the same job (outputs,
    params) as in the whole profile, and each run keeps its pretraining."""
    subsets = config.get("subsets") or {}
    for name, items in subsets.items():
        chosen = _subset_items(items, f"{path}: subsets.{name}")
        outside = [e for e in chosen if e not in config["experiments"]]
        if outside:
            raise ConfigError(f"{path}: subsets.{name} lists {', '.join(outside)}, which the profile's "
                              f"experiments do not: a subset only narrows `experiments`")
        _check_subset(name, chosen, path, matrix)
        _check_subset_replicas(name, chosen, path, config.get("pretrain_seeds"))
        _check_subset_targets(name, chosen, path, matrix)
    if not subset:
        return {}
    if subset not in subsets:
        raise ConfigError(
            f"{path}: no subset {subset!r} (key subsets); "
            + (f"known: {', '.join(sorted(subsets))}" if subsets else "this profile defines none"))
    chosen = _subset_items(subsets[subset], f"{path}: subsets.{subset}")
    config["experiments"] = list(chosen)
    config["subset"] = subset
    return {e: keep for e, keep in chosen.items() if keep is not None}


def _check_pretrain_seeds(config: dict, path: Path, matrix: dict, experiments: list[str]) -> None:
    """``pretrain_seeds`` (the schema checked its shape): the first seed is the one every run is pretrained
    with, so that its replica is the run itself (its id, model and results unchanged); the experiments are
    the profile's (``experiments``: all of them, whatever subset runs); and a run of them that evaluates
    another's model (ch. 4 skip) finds that run's replicas."""
    block = config.get("pretrain_seeds")
    if not block:
        return
    where = f"{path}: key pretrain_seeds"
    if block["seeds"][0] != PRETRAIN_SEED:
        raise ConfigError(f"{where}.seeds starts with {block['seeds'][0]}, but its first seed must be {PRETRAIN_SEED}, the "
                          f"seed every run is pretrained with: that replica is the run itself (its run id, model and "
                          f"results stay as they are). Write seeds: [{PRETRAIN_SEED}, ...]")
    outside = [e for e in block["experiments"] if e not in experiments]
    if outside:
        raise ConfigError(f"{where}.experiments lists {', '.join(outside)}, which the profile's experiments do not; "
                          f"it runs: {', '.join(experiments)}")
    listed = set(block["experiments"])
    for name in block["experiments"]:
        if name not in matrix:  # load_config names the unknown experiment
            continue
        for run_name, target in _evaluated_runs(name, matrix[name]).items():
            other = target.partition("-")[0]
            if other not in listed:
                raise ConfigError(f"{where}.experiments lists {name}, whose run {run_name} evaluates {target}'s model: "
                                  f"its replicas evaluate {target}'s, so list {other} too")


def _check_profile_file(config: dict, path: Path) -> None:
    """A profile named ``p`` is the file params/p.yaml: DVC's data stages (dvc.yaml) and every output
    folder are keyed by the name, and the stages read params/p.yaml. Any other file with the same name
    would train on data prepared from params/p.yaml's settings (another tokenizer, another corpus)."""
    profile = config["profile"]
    expected = paths.params_dir() / f"{profile}.yaml"
    if expected.is_file() and os.path.samefile(expected, path):
        return
    raise ConfigError(
        f"{path}: key profile = {profile!r}, but the profile {profile!r} is the file {expected}: DVC's data stages "
        f"(dvc.yaml, e.g. tokenizer@{profile}) prepare data/{profile}/ from that file, so this file's data settings "
        f"would be ignored. To run another profile, save it as params/<name>.yaml with `profile: <name>` and add "
        f"<name> to the `profiles` list in dvc.yaml")
