"""What produced a result: a content hash of the code, and the hardware it ran on.

Snakemake does not track imported modules, so rules carry ``code_version(...)`` of the subpackages
they depend on in their ``params``: editing a model file reruns pretraining; editing a table
template or the reporting code does not. Content hashes (not file times) so a fresh ``git clone``
or ``dvc checkout`` does not look like a change.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def code_version(*subpackages: str) -> str:
    """SHA-256 (first 16 hex digits) over the sources of the named subpackages / modules of leanlm."""
    digest = hashlib.sha256()
    for name in sorted(subpackages):
        target = PACKAGE_DIR / name
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]
        for path in files:
            digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def hardware() -> str:
    """A one-line description of the device a job ran on, for captions (e.g. Table 2.3's timings)."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return f"{torch.cuda.device_count()} x {name} (CUDA {torch.version.cuda})"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {cpu}, {torch.get_num_threads()} threads"
