"""What the lent GPU machine has, and what must travel to it (``make gpu-bundle``).

The machine (an NVIDIA H100 or H200; no network) runs Python 3.12 with PyTorch 2.11 (CUDA 13) and the
packages of :data:`DEVICE_PACKAGES`, as this workplace's device notes list them (KINDS.md, read on a
machine of that image on 2026-11-17). Every other distribution the check needs travels as a wheel and is
installed there with ``pip install --no-index --no-deps --target`` (:func:`device_command`).

:func:`carried_distributions` walks the requirements of leanlm's own dependencies (and lm-eval's, which
ch. 4's fine-tuning runs) as installed here, and keeps those the device lacks: the set is computed, not
typed in, so a new dependency of the package travels without anyone remembering it. tests/test_gpu_check.py
runs the tiny check with every other installed distribution made unimportable, as on the device.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

# KINDS.md, "Python packages already there" (nvidia-h100-x1, nvidia-h200; image 'cuda', 2026-11-17).
DEVICE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

DEVICE_PYTHON = "3.12"
DEVICE_TORCH = "2.11"

# What a session may spend (the device notes, 2026-11-28): 900 s of device time in all, the machine's
# start included, and 600 s a command. The start: 48 s of the first GPU check's 529 s of device time for
# a check of 481 s (docs/results/gpu/2026-11-28-h200), the wheels' install with it.
SESSION_DEVICE_S = 900
COMMAND_LIMIT_S = 600
MACHINE_START_S = 48
# A warm machine is given back after 30 s idle (the device tool's idle_release_s): the second call must
# follow the first within it, or it pays a new start.
IDLE_RELEASE_S = 30

# Roots of what runs on the device: leanlm's own dependencies (pyproject.toml) and lm-eval (the lmeval
# extra: ch. 4's fine-tuning families run through it). Left out, with the reason: what the check never
# runs there.
ROOTS = ("leanlm", "lm-eval")
NOT_ON_DEVICE = {
    "snakemake": "the check runs the rules' leanlm commands itself, not through Snakemake",
    "dvc": "the data travels prepared; no DVC stage runs on the device",
}

# Where the bundle's wheels are installed on the device (the device notes' --target folder).
SITE = "/tmp/site"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: metadata.Distribution) -> list[str]:
    """The names ``dist`` requires on the device (no extras; markers evaluated for Python 3.12 on Linux)."""
    from packaging.requirements import Requirement

    environment = {"python_version": DEVICE_PYTHON, "python_full_version": DEVICE_PYTHON + ".0",
                   "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                   "os_name": "posix", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "extra": ""}
    names = []
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate(environment):
            names.append(canonical(requirement.name))
    return names


def carried_distributions() -> dict[str, str]:
    """``{name: version installed here}`` of every distribution the check needs on the device and the
    device lacks: the requirement closure of :data:`ROOTS`, less :data:`DEVICE_PACKAGES`, less
    :data:`NOT_ON_DEVICE`'s subtrees (a device package's own requirements are the device's). Raises if a needed distribution is not installed here (its wheel
    could not be pinned to what the tests ran with)."""
    carried: dict[str, str] = {}
    seen: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = canonical(todo.pop())
        if name in seen or name in NOT_ON_DEVICE:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise RuntimeError(f"{name} is needed on the device but is not installed here; install leanlm's "
                               f"extras (make setup) before making the bundle") from None
        if name in DEVICE_PACKAGES:
            continue  # there with its own requirements, in the device's versions
        if name != "leanlm":  # leanlm travels as source, in the tree
            carried[name] = dist.version
        todo.extend(_requirements(dist))
    return dict(sorted(carried.items()))


def importable_top_levels(names) -> set[str]:
    """The top-level import names the installed distributions ``names`` provide (top_level.txt, else the
    first part of their files' paths)."""
    tops: set[str] = set()
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        listed = dist.read_text("top_level.txt")
        if listed:
            tops.update(line.strip() for line in listed.split() if line.strip())
            continue
        for file in dist.files or []:
            first = str(file).split("/")[0]
            if first.endswith((".dist-info", ".data", ".pth")) or first in ("..", "__pycache__") or "-" in first:
                continue
            tops.add(first.removesuffix(".py").split(".")[0])
    return {t for t in tops if t.isidentifier()}


def absent_on_device() -> set[str]:
    """Top-level modules installed here that the device would not have: neither in its image (with what its
    packages require, as installed here: there the device's own versions bring their own) nor carried."""
    here = {canonical(d.metadata["Name"]) for d in metadata.distributions()}
    present, todo = set(), [*(DEVICE_PACKAGES & here), *carried_distributions(), "leanlm"]
    while todo:
        name = todo.pop()
        if name in present or name in NOT_ON_DEVICE:
            continue
        present.add(name)
        try:
            todo.extend(r for r in _requirements(metadata.distribution(name)) if r in here)
        except metadata.PackageNotFoundError:
            continue
    blocked = importable_top_levels(here - present)
    # A module another present distribution also provides stays (e.g. a namespace shared by two).
    return blocked - importable_top_levels(here & present) - set(sys.stdlib_module_names)


def device_command(bundle: str, out: str = "$OUT", extra: str = "") -> str:
    """The shell command of the device ``run``: install the carried wheels, then the check (the form docs/gpu-check.md shows)."""
    return (f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
            f"--target {SITE} {bundle}/wheels/*.whl && export PYTHONPATH={SITE}:$PWD/workflow "
            f"PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false || exit; "
            f"python3 -m leanlm.cli gpu-check --device cuda --bundle {bundle} --out {out}{extra} "
            f"2>&1 | tee {out}/check.log")
