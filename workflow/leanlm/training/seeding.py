"""Seeds, deterministic settings and RNG snapshots.

Three random streams matter for a run: Python's ``random``, NumPy's global generator and torch's
(CPU plus every CUDA device). ``seed_everything`` seeds all of them; ``capture_rng_state`` /
``restore_rng_state`` snapshot them into plain tensors and numbers, so a checkpoint can be loaded with
``torch.load(weights_only=True)`` and a resumed run draws exactly the numbers (dropout masks, ...) an
uninterrupted run would have drawn. Data randomness (MLM masking, shuffling) should not use these global
streams at all but ``step_generator(seed, step, micro)``: a generator that depends only on where in
training a micro-batch sits, never on how often the job was restarted.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (all devices); optionally switch on deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        set_deterministic(True)


def set_deterministic(enabled: bool = True) -> None:
    """Ask torch for deterministic kernels (bit-identical reruns on GPU, at some speed cost).

    ``warn_only`` keeps ops without a deterministic implementation usable; cuBLAS needs its workspace
    setting in the environment before the first CUDA matmul for its GEMMs to be reproducible.
    """
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    torch.backends.cudnn.deterministic = enabled
    torch.backends.cudnn.benchmark = not enabled


def step_generator(seed: int, step: int, micro: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator determined by ``(seed, step, micro)`` alone.

    NumPy's ``SeedSequence`` mixes the three numbers so nearby triples give unrelated streams (a plain
    ``seed + step`` would make run seed 1 at step 0 replay run seed 0 at step 1).
    """
    mixed = np.random.SeedSequence([int(seed), int(step), int(micro)]).generate_state(2, dtype=np.uint32)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(mixed[0]) << 32 | int(mixed[1]))
    return gen


def capture_rng_state() -> dict:
    """Every global RNG state as tensors/plain values (safe for ``torch.load(weights_only=True)``)."""
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Inverse of ``capture_rng_state``."""
    random.setstate(_as_python_state(state["python"]))
    nps = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": nps["bit_generator"],
            "state": {"key": nps["key"].numpy().astype(np.uint32), "pos": nps["pos"]},
            "has_gauss": nps["has_gauss"],
            "gauss": nps["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        # A job may resume on a node with a different GPU count; restore what both sides have.
        for index in range(min(len(cuda_states), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cuda_states[index], index)


def _as_python_state(value):
    # random.setstate needs tuples all the way down; a round trip through some serialisers gives lists.
    if isinstance(value, list):
        return tuple(_as_python_state(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_as_python_state(v) for v in value)
    return value
