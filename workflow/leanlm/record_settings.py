"""Whether a results record was made with the settings its profile gives now (issue 24, case 10).

Snakemake reruns a job whose params changed, so the records a Snakemake run reads are always its
profile's. A stage run by hand (``leanlm aggregate``, ``render``, ``claims``) after a profile edit, or on
results copied from another profile, would read records made under other settings and caption them with
the new ones. :class:`RecordChecker` compares each record with the current profile and refuses a mismatch
(a :class:`~leanlm.errors.DataError` naming the file, each differing setting with both values, and what
to do); :func:`settings_hash` fingerprints what it compared, which aggregation writes beside every row
of all_runs.csv so that ``leanlm render`` can tell a table aggregated under other settings.

What must match is what changes a result: what the pretrain and finetune rules pass as params (what
makes Snakemake rerun a job), as far as the records keep it. The records themselves already hold it (no
parallel fingerprint is written into them):

- a fine-tuning record, results/<profile>/runs/<run>/<family>.json: ``profile``; ``run_id`` and
  ``family`` (a record copied over another run's file is another run's results); ``finetune``, the
  family's block with the run's variant (:func:`leanlm.runs.finetune_settings`); ``seeds``;
  ``evaluate_from`` and ``skip_simple_layers``; and under ``model`` each setting of the trained model
  (the run's ``model`` of the matrix at the profile's size: sizes, attention, embedding and its options),
  or for a hub run the checkpoint's name;
- the pretraining record of the model it fine-tuned (the run's pretrain.json, or that of the run it
  evaluates), where there is one: ``profile``, ``objective``, ``pretrain`` (pretrain.<objective> with the
  run's variant and size overrides, :func:`leanlm.runs.pretrain_settings`), the model's settings as above,
  and the data it was prepared from as its ``config`` recorded it: ``source`` and ``data``, without
  ``data.hub_mirror`` (where the data is read from, not what it is) and with only the named corpora and
  tokenizers this run reads.

Not compared, since they change no result: resources and cluster settings, the experiment list and
subsets (which jobs run, not how), the tables' and claims' settings. Nor is the code: Snakemake's code
params track it; a stage run by hand after a code edit is not refused. A record of a run the profile does
not run, or of a family the profile does not fine-tune that run on, is not checked against settings: no
table or claim of the profile reads it. A missing pretrain.json leaves the pretraining settings unchecked:
every pretraining job writes one with its model, so only results made by hand lack it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import json_text
from leanlm.runs import Run, finetune_seeds, finetune_settings, named_pretrain_data
from leanlm.runs import pretrain_settings as run_pretrain_settings
from leanlm.runs import runs

# data.<key>s that are not what the data is: where the hub's data is read from, and the named corpora and
# tokenizers (leanlm.data.pretrain_data.NAMED_KINDS), of which a run's record counts only those it reads.
NOT_DATA = ("hub_mirror", "corpora", "tokenizers")
NAMED_KEY = {"corpus": "corpora", "tokenizer": "tokenizers", "fixed_text": "corpora"}
SHOWN = 6  # differing settings listed in a message (then "and N more")


class _Absent:
    """A setting a record does not hold (shown as ``absent`` in messages)."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()
# One setting: its name (a dotted path in the record), how to read it from a record, the profile's value.
Setting = tuple[str, Callable[[dict], Any], Any]


def _at(*keys: str) -> Callable[[dict], Any]:
    def read(doc: dict) -> Any:
        for key in keys:
            if not isinstance(doc, dict) or key not in doc:
                return ABSENT
            doc = doc[key]
        return doc
    return read


def _data(config: dict, run: Run) -> dict:
    """The data settings a run's results depend on, from a profile (or a record's copy of one)."""
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(data, dict):
        return {}
    out = {k: v for k, v in data.items() if k not in NOT_DATA}
    try:
        named = named_pretrain_data(config, run)
    except (KeyError, TypeError):  # a record's copy of a profile that lacks the named data the run reads now
        named = {}
    for kind, items in named.items():
        out.setdefault(NAMED_KEY[kind], {}).update(items)
    return out


def _model(run: Run, prefix: tuple[str, ...]) -> list[Setting]:
    """The trained model's settings; a hub run's model is the checkpoint's own config: its name counts."""
    if run.objective == "hub":
        return [(".".join((*prefix, "hub_checkpoint")), _at(*prefix, "hub_checkpoint"), run.hub_checkpoint)]
    return [(".".join((*prefix, k)), _at(*prefix, k), v) for k, v in run.model.items()]


def family_settings(config: dict, run: Run, family: str, trained: Run) -> list[Setting]:
    """What a fine-tuning record of (run, family) must hold besides its profile, run and family (checked by
    :class:`RecordChecker` first); ``trained``: the run whose model it used."""
    return [
        ("finetune", _at("finetune"), finetune_settings(config, run, family)),
        ("seeds", _at("seeds"), finetune_seeds(config, run, family)),
        ("evaluate_from", _at("evaluate_from"), run.evaluate_from),
        ("skip_simple_layers", _at("skip_simple_layers"), run.skip_simple_layers),
        *_model(trained, ("model",)),
    ]


def pretraining_settings(config: dict, trained: Run) -> list[Setting]:
    """What the pretraining record (pretrain.json) of run ``trained`` must hold besides its profile."""
    model = ([("hub_checkpoint", _at("hub_checkpoint"), trained.hub_checkpoint)] if trained.objective == "hub"
             else _model(trained, ("model",)))
    return [
        ("objective", _at("objective"), trained.objective),
        ("pretrain", _at("pretrain"), run_pretrain_settings(config, trained)),
        *model,
        ("config.source", _at("config", "source"), config["source"]),
        ("config.data", lambda doc: _data(_at("config")(doc), trained), _data(config, trained)),
    ]


def _normal(value: Any) -> Any:
    """A value as JSON gives it back (tuples as lists), so a record and a profile compare alike."""
    return value if value is ABSENT else json.loads(json_text(value))


def _same(recorded: Any, expected: Any) -> bool:
    # 1 and 1.0 are one setting (YAML may write either); True and 1 are not.
    if isinstance(recorded, bool) or isinstance(expected, bool):
        return type(recorded) is type(expected) and recorded == expected
    return recorded == expected


def _differences(name: str, recorded: Any, expected: Any) -> list[str]:
    """``name: recorded X, profile Y`` for each leaf where the two differ (dicts compared key by key)."""
    if isinstance(recorded, dict) and isinstance(expected, dict):
        return [d for key in sorted(set(recorded) | set(expected), key=str)
                for d in _differences(f"{name}.{key}", recorded.get(key, ABSENT), expected.get(key, ABSENT))]
    return [] if _same(recorded, expected) else [f"{name}: recorded {recorded!r}, profile {expected!r}"]


def differences(doc: dict, settings: list[Setting]) -> list[str]:
    """Every setting of ``settings`` that record ``doc`` holds with another value (or not at all)."""
    return [d for name, read, expected in settings for d in _differences(name, _normal(read(doc)), _normal(expected))]


def settings_hash(config: dict, run: Run, family: str) -> str:
    """A fingerprint (16 hex digits of SHA-256) of the profile's settings that (run, family)'s results
    depend on: those of its fine-tuning record and of its model's pretraining record."""
    trained = _trained(config, run)
    values = [(name, expected) for name, _, expected in
              family_settings(config, run, family, trained) + pretraining_settings(config, trained)]
    return hashlib.sha256(json_text(values).encode()).hexdigest()[:16]


def _trained(config: dict, run: Run) -> Run:
    """The run whose trained model ``run`` fine-tunes or evaluates: itself, or ch. 4 skip's evaluate_from."""
    if not run.evaluate_from:
        return run
    for other in runs(config, with_replicas=True):  # a replica evaluates the same replica of its target
        if other.run_id == run.evaluate_from:
            return other
    return run  # the matrix checks evaluate_from names a run of the profile; left to that check


def _listed(found: list[str]) -> str:
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return "; ".join(found[:SHOWN]) + more


class RecordChecker:
    """Checks result records against one profile (a :func:`leanlm.config.load_config` result), each
    pretraining record once."""

    def __init__(self, config: dict):
        self.config = config
        self.profile = config["profile"]
        self.params_file = config.get("_params_file", f"params/{self.profile}.yaml")
        self.runs = {run.run_id: run for run in runs(config, with_replicas=True)}
        self._pretraining_checked: set[str] = set()

    def check_profile(self, doc: dict, path: Path) -> None:
        """Refuse (DataError) a record at ``path`` written by another profile."""
        written = doc.get("profile", ABSENT)
        if written is ABSENT:
            raise DataError(f"{path}: has no key profile, which every leanlm job writes: it cannot be told whose "
                            "results these are. Delete it and rerun its job (snakemake, or `leanlm finetune`)")
        if written != self.profile:
            raise DataError(
                f"{path}: written by profile {written!r} but read as profile {self.profile!r} ({self.params_file}): "
                f"results of different profiles must not be mixed. Move it back to results/{written}/ if it came from "
                f"there, or delete it and rerun its job under this profile (snakemake, or `leanlm finetune`)")

    def _place(self, doc: dict, path: Path) -> None:
        """A fine-tuning record is results/<profile>/runs/<run_id>/<family>.json of its own run and family."""
        run_id, family = doc.get("run_id", ABSENT), doc.get("family", ABSENT)
        if (run_id, family) != (path.parent.name, path.stem):
            raise DataError(
                f"{path}: holds the results of run {run_id!r} on family {family!r}, not of run "
                f"{path.parent.name!r} on {path.stem!r}: a results file belongs where its job wrote it "
                f"(results/<profile>/runs/<run_id>/<family>.json). Move it back, or delete it and rerun the job "
                f"(`leanlm finetune --params {self.params_file} --run {path.parent.name} --family {path.stem}`)")

    def family(self, doc: dict, path: Path) -> str:
        """Refuse (DataError) a fine-tuning record at ``path`` (results/<profile>/runs/<run>/<family>.json)
        written by another profile, for another run, or not with this profile's settings; return
        :func:`settings_hash` of its (run, family), or "" where the profile does not run it (no table or
        claim reads it: its settings are not compared)."""
        self.check_profile(doc, path)
        self._place(doc, path)
        run_id, family = path.parent.name, path.stem
        run = self.runs.get(run_id)
        if run is None or family not in run.finetune:
            return ""
        trained = _trained(self.config, run)
        found = differences(doc, family_settings(self.config, run, family, trained))
        if found:
            raise DataError(
                f"{path}: made with other settings than {self.params_file} gives now: {_listed(found)}. These "
                f"results are stale: rerun the job (`leanlm finetune --params {self.params_file} --run {run_id} "
                f"--family {family}`, or `snakemake`, which reruns every job whose settings changed), or restore the "
                "settings they were made with")
        self.pretraining(trained)
        return settings_hash(self.config, run, family)

    def pretraining(self, trained: Run) -> dict | None:
        """Refuse (DataError) run ``trained``'s pretrain.json if it was not made with this profile's settings;
        its contents (None where there is none: see the module docstring)."""
        path = paths.results_dir(self.profile) / "runs" / trained.run_id / "pretrain.json"
        if not path.is_file():
            return None
        doc = read_record(path)
        if trained.run_id in self._pretraining_checked:
            return doc
        self.check_profile(doc, path)
        found = differences(doc, pretraining_settings(self.config, trained))
        if found:
            raise DataError(
                f"{path}: the model was pretrained with other settings than {self.params_file} gives now: "
                f"{_listed(found)}. Its results are stale: rerun its pretraining and the fine-tuning of the runs "
                f"that use it (`snakemake` reruns exactly those; by hand `leanlm pretrain --params {self.params_file} "
                f"--run {trained.run_id}`, then `leanlm finetune`), or restore the settings it was made with")
        self._pretraining_checked.add(trained.run_id)
        return doc


def read_record(path: Path) -> dict:
    """A results JSON as an object, or a DataError naming the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable results JSON ({exc}); delete it and rerun its job") from None
    if not isinstance(doc, dict):
        raise DataError(f"{path}: a results JSON must be an object, got {type(doc).__name__}; delete it and rerun its job")
    return doc
