"""Sharing a profile's trained models and results through a DVC remote (``leanlm share push|pull``).

The data stages are DVC's own (dvc.yaml, dvc.lock), but a Snakemake run builds them without DVC (the same
``leanlm data`` commands), so that running a job changes no file git tracks: ``push`` registers the profile
with DVC (``dvc_stages.yaml``) and records its built data in ``dvc.lock`` (``dvc commit``), to be committed with
the ``.dvc`` files. The rest of a profile's outputs (``models/<profile>``,
``results/<profile>`` with each run's ``pretrain.json``, ``paper_tables/<profile>``) are Snakemake's, and
travel as three ``dvc add``-ed folders (``models/<profile>.dvc`` ... committed to git).

Pulled files alone would leave Snakemake without its metadata: it would neither rerun a job whose settings
changed since (its params and code triggers only compare against a recorded job) nor trust the file times,
which a pull sets in no particular order. So ``push`` first copies Snakemake's own metadata record of every
output of the profile (the job's params, including leanlm's code fingerprint, the rule's code, its inputs and
the time the output was finished) into ``results/<profile>/SNAKEMAKE_RECORDS.json``, which travels with the
outputs; ``pull`` writes those records back into ``.snakemake/metadata`` and sets every pulled output's file
time to the recorded one. Snakemake then compares the settings of the clone with the recorded ones, exactly
as on the machine that built them: nothing changed reruns nothing, a changed setting reruns its dependants.
Records are keyed by output paths relative to the project root, so they hold no machine's absolute path.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from leanlm.data.plumbing.dvc_profiles import dvc_profiles, register
from leanlm.errors import ConfigError, DataError
from leanlm.io import write_json
from leanlm.snakemake_records import METADATA, decode as _decode, record_path as _record_path

SHARED_DIRS = ("models", "results", "paper_tables")  # Snakemake's outputs, one dvc-added folder each per profile
DATA_STAGES = ("fetch", "corpus", "tokenizer", "tasks")
NAMED_DATA_STAGES = ("corpora", "tokenizers")  # only for dvc.yaml's named_data_profiles
RECORDS_NAME = "SNAKEMAKE_RECORDS.json"


def records_file(root: Path, profile: str) -> Path:
    return root / "results" / profile / RECORDS_NAME


def _prefixes(profile: str) -> tuple[str, ...]:
    return tuple(f"{top}/{profile}/" for top in ("data", *SHARED_DIRS))


def collect_records(root: Path, profile: str) -> dict[str, dict]:
    """Snakemake's metadata record of every existing output of ``profile`` (data folders, models, results,
    tables), keyed by its path relative to ``root``."""
    metadata = root / METADATA
    if not metadata.is_dir():
        raise DataError(f"{metadata} is missing: run the workflow (snakemake) before sharing its outputs")
    records = {}
    for path in sorted(p for p in metadata.rglob("*") if p.is_file()):
        try:
            key = _decode(path, metadata)
        except (ValueError, UnicodeDecodeError):
            continue  # not a record Snakemake named
        if key.startswith(_prefixes(profile)) and (root / key).exists():
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("incomplete"):
                raise DataError(f"{key} is marked incomplete by Snakemake ({path}); rerun the workflow before sharing")
            records[key] = record
    if not any(k.startswith(f"models/{profile}/") for k in records):
        raise DataError(f"no Snakemake record of any output under models/{profile}: nothing trained to share")
    return records


def restore_records(root: Path, profile: str) -> int:
    """Write the shared records back into ``.snakemake/metadata`` and set each output's file time to its
    recorded finishing time; return how many outputs were restored."""
    path = records_file(root, profile)
    if not path.is_file():
        raise DataError(f"{path} is missing: pull results/{profile}.dvc first (`leanlm share push` writes it)")
    records = _checked_records(root, profile, path)
    metadata = root / METADATA
    metadata.mkdir(parents=True, exist_ok=True)
    restored = 0
    for key, record in records.items():
        output = root / key
        if not output.exists() or "endtime" not in record:
            continue  # a data folder this clone did not pull
        target = _record_path(metadata, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record), encoding="utf-8")
        os.utime(output, (record["endtime"], record["endtime"]), follow_symlinks=False)
        restored += 1
    return restored


def _checked_records(root: Path, profile: str, path: Path) -> dict[str, dict]:
    """The records of ``path``, every one checked before any is applied: the file comes from the remote, and
    its keys name the files whose times are set. A key must be a relative path under one of the profile's
    folders of the project (``data/<profile>/``, ``models/<profile>/`` ...), with no ``..`` and no symbolic
    link on the way out of the project; ``endtime`` must be a time. Else DataError naming the file and key."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: not a records file `leanlm share push` writes ({err})") from None
    if not isinstance(records, dict):
        raise DataError(f"{path}: not a records file `leanlm share push` writes (a mapping of output paths)")
    prefixes, top = _prefixes(profile), root.resolve()
    for key, record in records.items():
        problem = None
        parts = Path(key).parts
        if Path(key).is_absolute() or ".." in parts or not key.startswith(prefixes):
            problem = f"is not a path under {', '.join(prefixes)} of the project"
        elif not (root / key).parent.resolve().is_relative_to(top / parts[0] / profile):
            problem = "leads out of the profile's folder through a symbolic link"
        elif not isinstance(record, dict) or not _is_time(record.get("endtime", 0.0)):
            problem = "has no valid record (a mapping whose endtime is a time)"
        if problem:
            raise DataError(f"{path}: key {key!r} {problem}; the file was not written by `leanlm share push` "
                            f"(nothing was restored). Check the remote, then pull again")
    return records


def _is_time(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")


def _dvc(root: Path, *args: str) -> None:
    proc = subprocess.run(["dvc", *args], cwd=root)
    if proc.returncode:
        raise DataError(f"`dvc {' '.join(args)}` failed in {root} (exit {proc.returncode})")


def _data_stages(root: Path, profile: str) -> list[str]:
    dvc_file = root / "dvc.yaml"
    if profile not in dvc_profiles(dvc_file):
        raise ConfigError(f"{dvc_file}: profile {profile!r} is not in its vars profiles: DVC has no data stages for it")
    stages = [f"{s}@{profile}" for s in DATA_STAGES]
    if profile in dvc_profiles(dvc_file, "named_data_profiles"):
        stages += [f"{s}@{profile}" for s in NAMED_DATA_STAGES]
    return stages


def lock_data(root: Path, config: dict) -> list[str]:
    """Make DVC define the profile's data stages (``dvc_stages.yaml``, :func:`leanlm.data.plumbing.dvc_profiles.register`)
    and record the data as built in ``dvc.lock`` (``dvc commit``: hashes its dependencies and outputs, runs
    nothing); return the stages. Snakemake's data rules build the data without DVC, so this is where the
    tracked DVC files change: when a profile is shared, and they are committed with its ``.dvc`` files."""
    register(config, root / "dvc.yaml")
    stages = _data_stages(root, config["profile"])
    _dvc(root, "commit", "--force", "--quiet", *stages)
    return stages


def push(root: Path, config: dict, remote: str | None = None) -> list[str]:
    """Record, ``dvc add`` and ``dvc push`` the profile's outputs and data (locked first, :func:`lock_data`);
    return the .dvc files to commit (with dvc.lock and dvc_stages.yaml)."""
    profile = config["profile"]
    records = collect_records(root, profile)
    write_json(records_file(root, profile), records)
    folders = [f"{top}/{profile}" for top in SHARED_DIRS if (root / top / profile).is_dir()]
    stages = lock_data(root, config)
    _dvc(root, "add", *folders)
    targets = stages + [f"{f}.dvc" for f in folders]
    _dvc(root, "push", *(["-r", remote] if remote else []), *targets)
    return [f"{f}.dvc" for f in folders]


def pull(root: Path, profile: str, remote: str | None = None) -> int:
    """``dvc pull`` the profile's data stages and shared folders, then restore Snakemake's records."""
    folders = [f"{top}/{profile}.dvc" for top in SHARED_DIRS if (root / top / f"{profile}.dvc").is_file()]
    if not folders:
        raise DataError(f"no models/{profile}.dvc, results/{profile}.dvc or paper_tables/{profile}.dvc in {root}: "
                        f"nothing was shared for this profile (`leanlm share push` on the machine that built it)")
    check_no_run(root, profile)
    verified_pull(root, [*_data_stages(root, profile), *folders], remote)
    check_no_run(root, profile)  # one may have started during the pull: its records must not be overwritten
    return restore_records(root, profile)


def verified_pull(root: Path, targets: list[str], remote: str | None = None) -> None:
    """``dvc pull targets`` with the remote's ``verify`` option on for this pull: DVC hashes every file it
    downloads and keeps none whose content differs from its name (the hash git records in the ``.dvc``
    files and dvc.lock). Without it, an object changed in the remote is checked out as it is, with exit 0,
    and even ``dvc status`` then reports nothing (DVC trusts the hashes of what it checked out). A file that
    fails is refused with its path; nothing of it is checked out."""
    from dvc.exceptions import CheckoutError, DvcException
    from dvc.repo import Repo

    here = os.getcwd()
    os.chdir(root)  # DVC resolves targets (.dvc files, stage names) against the working directory
    try:
        with Repo(str(root), remote=remote, remote_config={"verify": True}) as repo:
            try:
                repo.pull(targets=targets, remote=remote)
            except CheckoutError as err:
                failed = list((err.result or {}).get("failed") or err.target_infos)
                files = _unverified_files(repo, root, failed)
                raise DataError(f"the DVC remote{f' {remote!r}' if remote else ''} holds copies that differ from what "
                                f"git records (or lacks them), so they were not checked out: {', '.join(files)}. "
                                f"Someone changed or removed them in the remote: push them again from a machine whose "
                                f"copies are right (`leanlm share push`), then pull") from None
    except ValueError as err:  # dvc: "Missing remote name"
        raise DataError(f"no DVC remote to pull from in {root} ({err}): add one (`dvc remote add -d ...`) or give "
                        f"--remote") from None
    except DvcException as err:
        raise DataError(f"`dvc pull {' '.join(targets)}` failed in {root}: {err}") from None
    finally:
        os.chdir(here)


def _unverified_files(repo, root: Path, failed: list[str]) -> list[str]:
    """The files of the failed outputs that are not in the cache after a verified pull (their remote copy
    did not match its hash, or is missing); a whole output where its listing itself is not there."""
    cache, named = repo.cache.local, []
    wanted = {str(Path(path)) for path in failed}
    for stage in repo.index.stages:
        for out in stage.outs:
            path = str(Path(out.fs_path).relative_to(Path(root).resolve()))
            if path not in wanted or out.hash_info is None or not out.hash_info.value:
                continue
            listing = Path(cache.oid_to_path(out.hash_info.value))
            if not out.hash_info.isdir or not listing.is_file():
                named.append(path)
                continue
            entries = json.loads(listing.read_text(encoding="utf-8"))
            named += [f"{path}/{entry['relpath']}" for entry in entries
                      if not Path(cache.oid_to_path(entry["md5"])).is_file()]
    return named or sorted(wanted)


def check_no_run(root: Path, profile: str) -> None:
    """DataError while a Snakemake run of ``profile`` holds its lock in this project: a pull would replace
    its outputs and records mid-run. Snakemake's lock is a set of files ``.snakemake/locks/<n>.{input,output}
    .lock`` listing the paths a running (not dry) Snakemake reads and writes, removed when it ends; a run
    killed hard leaves them, which ``snakemake --unlock`` clears. Checked before the pull and again before the
    records are restored; a run started in between is seen by the second check (its outputs may then be
    pulled copies: rerun it after the pull)."""
    locks = root / ".snakemake" / "locks"
    held: dict[str, list[str]] = {}
    for lock in sorted(locks.glob("*.lock")) if locks.is_dir() else []:
        try:
            lines = lock.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue  # removed as its run ended
        paths = [_relative(line.strip(), root) for line in lines if line.strip()]
        ours = [path for path in paths if path.startswith(_prefixes(profile))]
        if ours:
            held[str(lock.relative_to(root))] = ours
    if held:
        named = "; ".join(f"{lock} ({len(paths)} path(s) of the profile, e.g. {paths[0]})" for lock, paths in held.items())
        raise DataError(f"a Snakemake run of profile {profile!r} holds its lock in {root}: {named}. A pull now would "
                        f"replace its outputs mid-run; wait for it to end, or, if no run is going (one was killed), "
                        f"clear the lock with `snakemake --unlock --configfile params/{profile}.yaml`")


def _relative(path: str, root: Path) -> str:
    if not os.path.isabs(path):
        return path
    try:
        return str(Path(path).relative_to(root.resolve()))
    except ValueError:
        return path
