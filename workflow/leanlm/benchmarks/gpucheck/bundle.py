"""``make gpu-bundle`` (``leanlm gpu-bundle``): what travels to the GPU machine, prepared here on a CPU.

The bundle is one git-ignored folder (``.gpu-bundle/``) named in the device run's ``carry``:

- ``bundle.json``: what it holds, the commit it was made at, its size;
- ``profile.yaml``: the profile its data was prepared with (params/smoke.yaml with one fine-tuning seed;
  ``--tiny``: cut to a few steps and examples), section 5's params/smoke.yaml on the device;
- ``data.tar.xz``: that profile's prepared data (corpus, tokenizer, task sets: the data stages' outputs,
  made here in a scratch project by ``leanlm data fetch|corpus|tokenizer|tasks``);
- ``reference/``: section 4's models, batches and CPU fp32 reference (:mod:`.reference`);
- ``wheels/``: every distribution the check needs that the device lacks (:mod:`.device`), pinned to the
  versions installed here (pure Python but for rpds-py, jsonschema's compiled core, fetched for
  CPython 3.12 on manylinux x86-64).

It must stay under :data:`MAX_BYTES` (the device carries at most 64 MiB with the working tree).
``leanlm gpu-check --tiny`` without ``--bundle`` makes a tiny bundle (no wheels) in a temporary folder
first, so the check's reading side runs on every CI run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leanlm.benchmarks.gpucheck import device as dev
from leanlm.benchmarks.gpucheck.pipeline import PIPELINE_RUNS, PROFILE, leanlm_env, run_leanlm, scratch_project
from leanlm.benchmarks.gpucheck.protocol import DEVICE_CALLS, section_seconds
from leanlm.benchmarks.gpucheck.reference import build_reference
from leanlm.io import sha256_file, write_json, write_text

BUNDLE_FILE = "bundle.json"
DATA_FILE = "data.tar.xz"
MAX_BYTES = 40 * 2**20
DEFAULT_DIR = ".gpu-bundle"
DATA_PARTS = ("corpus", "tokenizer", "tasks", "raw/MANIFEST.json")
RUN_TIMEOUT_S = 1800  # each data stage, here on the CPU


def profile_text(tiny: bool) -> str:
    """The bundle's profile: params/smoke.yaml with fine-tuning seed 0 only (each seed is one more
    fine-tuning per task; one exercises the code), and with ``tiny`` a few steps and examples of one task
    per family, so the whole pipeline section runs in seconds on a CPU core."""
    from leanlm import paths
    from leanlm.io import load_yaml

    import yaml

    doc = load_yaml((paths.params_dir() / f"{PROFILE}.yaml").read_text(encoding="utf-8"))
    doc["seeds"] = [0]
    if tiny:
        doc["experiments"] = sorted({run.split("-", 1)[0] for run, _ in PIPELINE_RUNS})
        doc["data"]["tokenizer"]["vocab_size"] = 400
        doc["data"]["tasks"].update(max_train_examples=24, max_eval_examples=12)
        for block in (*doc["pretrain"].values(), *doc.get("pretrain_variants", {}).values()):
            block.update(steps=4, warmup_steps=1)
            if "batch_size" in block:
                block["batch_size"] = 4
            if block.get("checkpoint_every"):
                block["checkpoint_every"] = 2
        for family, block in doc["finetune"].items():
            # lm-eval: one multiple-choice task and one perplexity task (its two kinds of request); BoolQ's
            # stand-in (sentiment snippets) builds from little data, ARC's (definitions) needs more.
            block["tasks"] = ["lm_eval_boolq", "lm_eval_wikitext"] if family == "lm_eval" else block["tasks"][:1]
            for key, value in (("epochs", 1), ("batch_size", 8), ("limit", 4), ("bootstrap_iters", 2),
                               ("max_examples", 4), ("max_tokens", 200)):
                if key in block:
                    block[key] = value
    return yaml.safe_dump(doc, sort_keys=False)


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _prepare_data(project: Path, echo) -> Path:
    """Run the four data stages of the bundle's profile in ``project`` (a scratch project); its data dir."""
    env = leanlm_env(project)
    env["CUDA_VISIBLE_DEVICES"] = ""
    log = project / "data-stages.log"
    for stage in ("fetch", "corpus", "tokenizer", "tasks"):
        echo(f"gpu-bundle: data {stage}")
        run_leanlm(["data", stage, "--params", f"params/{PROFILE}.yaml"], project, log, RUN_TIMEOUT_S, env)
    return project / "data" / PROFILE


def _archive(data_dir: Path, target: Path) -> None:
    with tarfile.open(target, "w:xz") as tar:
        for part in DATA_PARTS:
            tar.add(data_dir / part, arcname=part)


def download_wheels(target: Path, echo) -> dict[str, str]:
    """Wheels of :func:`device.carried_distributions` for CPython 3.12 on manylinux x86-64 (pip download),
    built here from the source distribution for the few published without a wheel (pure Python)."""
    target.mkdir(parents=True, exist_ok=True)
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                                             "manylinux2014_x86_64", "manylinux1_x86_64")]
    wanted = dev.carried_distributions()
    for name, version in wanted.items():
        spec = f"{name}=={version}"
        echo(f"gpu-bundle: wheel {spec}")
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "--python-version", dev.DEVICE_PYTHON, "--implementation", "cp", *platforms,
                              "-d", str(target), spec], capture_output=True, text=True)
        if got.returncode != 0:  # no wheel published: build one from the sdist (pure Python: any platform)
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(target), spec],
                                   capture_output=True, text=True)
            if built.returncode != 0:
                raise RuntimeError(f"no wheel of {spec} for the device: pip download said\n{got.stderr[-2000:]}\n"
                                   f"and pip wheel said\n{built.stderr[-2000:]}")
    files = {}
    for path in sorted(target.glob("*.whl")):
        files[dev.canonical(path.name.split("-")[0])] = path.name
    missing = sorted(set(wanted) - set(files))
    if missing:
        raise RuntimeError(f"wheels missing after download: {missing}")
    return files


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def build_bundle(out: Path, tiny: bool = False, wheels: bool = True, echo=print) -> dict[str, Any]:
    """Make the bundle in ``out`` (replaced whole); returns bundle.json's content. Any GPU is hidden from the
    data stages and the reference (the reference is a CPU fp32 one)."""
    from leanlm import paths

    out = Path(out)
    work = Path(tempfile.mkdtemp(prefix="leanlm-gpu-bundle-"))
    try:
        staged = work / "bundle"
        staged.mkdir()
        text = profile_text(tiny)
        write_text(staged / "profile.yaml", text)
        project = scratch_project(work / "project", text)
        data_dir = _prepare_data(project, echo)
        echo("gpu-bundle: data archive")
        _archive(data_dir, staged / DATA_FILE)
        echo("gpu-bundle: CPU fp32 reference (section 4)")
        (staged / "reference").mkdir()
        build_reference(data_dir, staged / "reference", tiny)
        wheel_files = download_wheels(staged / "wheels", echo) if wheels else {}
        record = {"format": "leanlm-gpu-bundle", "version": 1, "tiny": tiny, "profile": PROFILE,
                  "commit": _git_commit(paths.project_root()), "pipeline_runs": [list(r) for r in PIPELINE_RUNS],
                  "data": {"file": DATA_FILE, "sha256": sha256_file(staged / DATA_FILE), "parts": list(DATA_PARTS)},
                  "wheels": wheel_files, "device_python": dev.DEVICE_PYTHON}
        record["bytes"] = folder_bytes(staged)
        write_json(staged / BUNDLE_FILE, record)
        if record["bytes"] > MAX_BYTES:
            raise RuntimeError(f"the bundle is {record['bytes'] / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB "
                               f"it may take (the device carries 64 MiB with the working tree)")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(out))
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Bundle:
    """A bundle folder as the check reads it; ``fresh``: made by this check (``--tiny`` without ``--bundle``)."""

    root: Path
    record: dict[str, Any]
    fresh: bool = False

    @classmethod
    def open(cls, root: Path, fresh: bool = False) -> "Bundle":
        root = Path(root)
        path = root / BUNDLE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: make the bundle with `make gpu-bundle` and carry "
                                    f"{root} to the device")
        record = json.loads(path.read_text(encoding="utf-8"))
        data = root / record["data"]["file"]
        if sha256_file(data) != record["data"]["sha256"]:
            raise ValueError(f"{data} is not the archive {path} records (SHA-256 differs); make the bundle again")
        return cls(root, record, fresh)

    @property
    def reference_dir(self) -> Path:
        return self.root / "reference"

    def profile_text(self) -> str:
        return (self.root / "profile.yaml").read_text(encoding="utf-8")

    def unpack_data(self, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(self.root / self.record["data"]["file"], "r:xz") as tar:
            tar.extractall(target, filter="data")  # "data": no member lands outside target


# A call's timeout beyond its check's budget: the wheels' install, Python's start, the last sub-step
# outlasting its section (the first GPU check: 481 s for a budget of 480, 497 s of wall time with the
# install, 16 s over). 35 s, so that both calls run to their timeouts, the machine's start and the 30 s
# idle window between them still fit a session's 900 s: 48 + 485 + 335 + 30 = 898 (tests/test_gpu_check.py).
CALL_MARGIN_S = 35


def device_runs(bundle_dir: str = DEFAULT_DIR) -> list[dict[str, Any]]:
    """The device ``run`` calls that carry the bundle and run the check, in order (pasted by the next
    session): one per :data:`protocol.DEVICE_CALLS` entry, its sections at their default budget."""
    calls = []
    for sections in DEVICE_CALLS:
        budget = section_seconds(sections)
        extra = f" --sections {','.join(sections)} --budget-s {budget:g}"
        calls.append({"command": dev.device_command(bundle_dir, extra=extra), "carry": [bundle_dir],
                      "timeout_s": int(budget + CALL_MARGIN_S)})
    return calls


def report(record: dict[str, Any], out: Path) -> str:
    """What ``make gpu-bundle`` prints: the size, the contents and the device calls, in order."""
    from leanlm import paths

    try:  # carry names a path relative to the repository root
        where = str(Path(out).resolve().relative_to(paths.project_root().resolve()))
    except ValueError:
        where = str(out)
    calls = device_runs(where)
    data = out / record["data"]["file"]
    wheels = f"{len(record['wheels'])} ({folder_bytes(out / 'wheels') / 2**20:.1f} MiB)" if record["wheels"] else "none"
    lines = [f"gpu-bundle: {out} is {record['bytes'] / 2**20:.1f} MiB ({record['bytes']:,} bytes; limit "
             f"{MAX_BYTES / 2**20:.0f} MiB) at commit {record.get('commit') or 'unknown'}",
             f"  data: {data.name} ({data.stat().st_size / 2**20:.1f} MiB, profile {record['profile']}); reference: "
             f"{folder_bytes(out / 'reference') / 2**20:.1f} MiB; wheels: {wheels}",
             "", f"The {len(calls)} device calls (the run tool's arguments), in order, the next as soon as "
                 f"one returns:"]
    for number, call in enumerate(calls, 1):
        lines += ["", f"call {number}:", json.dumps(call, indent=1)]
    return "\n".join(lines)

