"""The profiles DVC prepares data for: dvc.yaml's ``profiles`` list, against the profile being run.

DVC's data stages (``fetch@<profile>`` ... ``tasks@<profile>``) exist only for the names dvc.yaml's
``vars`` list under ``profiles``, and each reads ``params/<profile>.yaml`` (that a profile is that file,
:func:`leanlm.config.load_config` checks). A profile missing from the list would pass every other check and
fail only when Snakemake's ``data`` job runs ``dvc repro``, after the jobs before it; :func:`check_dvc_profile`
refuses it while the workflow is parsed (and in ``leanlm validate``), before any job.
"""

from __future__ import annotations

from pathlib import Path

from leanlm.errors import ConfigError
from leanlm.io import read_yaml

DVC_DATA_PROFILES_VAR = "profiles"  # dvc.yaml's list of the profiles the four data stages run for


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
