"""The profiles DVC prepares data for: dvc.yaml's ``profiles`` list, against the profile being run; and
the profiles whose stages DVC defines in this checkout (``dvc_stages.yaml``).

DVC's data stages (``fetch@<profile>`` ... ``tasks@<profile>``) read ``params/<profile>.yaml`` (that a
profile is that file, :func:`leanlm.config.load_config` checks), for the names dvc.yaml's ``vars`` list under
``profiles``. A profile missing from the list would pass every other check and fail only when Snakemake's
``data`` job runs, after the jobs before it; :func:`check_dvc_profile` refuses it while the
workflow is parsed (and in ``leanlm validate``), before any job.

dvc.yaml's ``foreach`` lists are not that list but ``dvc_stages.yaml``'s (a vars file): the profiles whose
data was shared from here or came with the commit, each entered by :func:`register` (``leanlm data
register``, which ``leanlm share push`` runs before it locks the data with ``dvc commit``; a Snakemake run
builds the data without DVC and changes neither file). A stage DVC defines but never ran has no lock
entry, and a bare ``dvc pull`` fails on it ("Checkout failed", exit 1): with the stages defined only once
built, the committed ``dvc.lock`` records every stage a clone defines (``tests/test_dvc_lock.py``), and
``dvc pull`` pulls them all.
"""

from __future__ import annotations

from pathlib import Path

from leanlm.errors import ConfigError
from leanlm.io import read_yaml, write_text

DVC_DATA_PROFILES_VAR = "profiles"  # dvc.yaml's list of the profiles the four data stages run for
STAGES_FILE = "dvc_stages.yaml"  # beside dvc.yaml: the profiles whose stages DVC defines here (a vars file)
STAGED, STAGED_NAMED = "staged", "staged_named"  # its lists: the four data stages; corpora and tokenizers
_HEADER = """\
# The profiles whose data stages DVC defines in this checkout (dvc.yaml's foreach lists read this file):
# `leanlm data register` adds a profile when its data is first shared (`leanlm share push` runs it, then
# locks the data with `dvc commit`). Commit it with dvc.lock: a clone then defines exactly the stages the lock records, so a bare
# `dvc pull` finds no stage without a lock entry (leanlm/data/plumbing/dvc_profiles.py).
"""


def dvc_profiles(dvc_file: Path, var: str = DVC_DATA_PROFILES_VAR) -> list[str]:
    """The names dvc.yaml's ``vars`` list under ``var`` (every entry that sets it, in order)."""
    doc = read_yaml(dvc_file) or {}
    variables = doc.get("vars", []) if isinstance(doc, dict) else []
    return [p for entry in variables if isinstance(entry, dict) for p in (entry.get(var) or [])]


def check_dvc_profile(config: dict, dvc_file: str | Path) -> None:
    """ConfigError unless ``dvc_file`` has the data stages of the profile (and, for a profile naming
    pretraining data, its named-data stages: :func:`leanlm.data.pretrain_data.check_dvc_stages`)."""
    from leanlm.data.pretrain_data import check_dvc_stages

    path = Path(dvc_file)
    if not path.is_file():
        raise ConfigError(f"{path} is missing: the data stages are DVC's (dvc.yaml beside the Snakefile)")
    profile = config["profile"]
    listed = dvc_profiles(path)
    if profile not in listed:
        raise ConfigError(f"{config['_params_file']}: key profile = {profile!r} is not in {path}'s vars "
                          f"{DVC_DATA_PROFILES_VAR} ({', '.join(listed) or 'none'}), so DVC has no stages "
                          f"fetch@{profile}, corpus@{profile}, tokenizer@{profile} and tasks@{profile} to prepare its "
                          f"data; add {profile!r} to that list")
    check_dvc_stages(config, path)


def staged_profiles(dvc_file: Path) -> dict[str, list[str]]:
    """``dvc_stages.yaml``'s lists (empty when the file is missing)."""
    path = Path(dvc_file).with_name(STAGES_FILE)
    doc = read_yaml(path) if path.is_file() else {}
    doc = doc if isinstance(doc, dict) else {}
    return {key: list(doc.get(key) or []) for key in (STAGED, STAGED_NAMED)}


def register(config: dict, dvc_file: str | Path) -> bool:
    """Enter the profile in ``dvc_stages.yaml`` (and, for a profile with named pretraining data, in its named
    list), so that DVC defines its stages; return whether the file changed. Written atomically, and only
    when it changes."""
    from leanlm.data.pretrain_data import DVC_PROFILES_VAR as NAMED

    path = Path(dvc_file)
    check_dvc_profile(config, path)
    profile = config["profile"]
    lists = staged_profiles(path)
    wanted = {STAGED: True, STAGED_NAMED: profile in dvc_profiles(path, NAMED)}
    if all(profile in lists[key] for key, want in wanted.items() if want):
        return False
    for key, want in wanted.items():
        if want and profile not in lists[key]:
            lists[key].append(profile)
    body = "".join(f"{key}: [{', '.join(names)}]\n" for key, names in lists.items())
    write_text(path.with_name(STAGES_FILE), _HEADER + body)
    return True
