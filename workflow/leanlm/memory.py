"""Peak GPU memory of a profile's pretraining runs: ``leanlm budget``'s memory table and ``leanlm
validate``'s warning when a run would not fit its GPU (docs/memory.md).

A run's peak is

    weights + gradients + AdamW state      float32, 16 bytes a parameter (leanlm.memory_probe.static_bytes)
    + the step's peak beyond them          at the run's micro-batch (batch_size x seq_len), bf16 autocast,
                                           the loss alone, with or without activation checkpointing

where the step is measured on the meta device by :func:`leanlm.memory_probe.measure_step`. Measuring a
24-layer model op by op takes seconds, and a profile has ~100 distinct models, so the step is measured on
shallow copies of the model (2-3 blocks) and extrapolated: the bytes a forward leaves for the backward
are a constant (embeddings, head, loss) plus a fixed amount per block of each kind (BERT's or GPT-2's
block; the encoder's and the decoder's blocks; a Qwen model's simple and standard layers, in the context
of the whole model: a fixed Q/K stream adds its row to every layer), which the copies give exactly. The
step's peaks (in the forward and in the backward) are extrapolated the same way and, where what they add
to the activations does not grow with depth (the loss's chunk, one block's backward), also as the
activations plus the largest excess a copy shows; the larger of the two is kept. tests/test_memory.py
holds both against whole models, at the paper's 500M scale too (peak within 0 to +5%).

Measurements are cached per distinct copy and micro-batch, in memory and on disk under the leanlm cache
(``LEANLM_CACHE``, default ``~/.cache/leanlm``), keyed by the model library's code (:func:`_measured`):
the first ``leanlm budget`` or ``leanlm validate`` of a profile measures, later ones read.

A run fits a GPU of G GB when its peak is at most (1 - MARGIN) x G x 10^9 bytes: the data sheets' GB
are below the cards' real capacity (an H100's "80GB" is 79.6 GiB = 85.5e9 bytes), and the 10% margin
is for what the estimate leaves out: the allocator's rounding and fragmentation, the CUDA context,
NCCL's buffers under DDP and torch.compile's workspaces.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from leanlm import paths
from leanlm.errors import ConfigError
from leanlm.io import write_json
from leanlm.modeling.config import ModelConfig

log = logging.getLogger(__name__)

GiB = 2**30
MARGIN = 0.10
# Memory by GPU name (NVIDIA's data sheets, GB), matched as a substring, more specific names first.
GPU_MEMORY_GB: tuple[tuple[str, float], ...] = (
    ("H100 NVL", 94), ("H100", 80), ("H200", 141), ("A100 40GB", 40), ("A100", 80), ("L40S", 48),
    ("L40", 48), ("L4", 24),
)


def gpu_memory_gb(name: str) -> float | None:
    """The memory of a GPU by name (e.g. ``H100``), or None when unknown."""
    for key, gb in GPU_MEMORY_GB:
        if key.lower() in name.lower():
            return gb
    return None


def usable_bytes(gb: float) -> float:
    """What an estimate may reach on a GPU of ``gb`` GB (module docstring)."""
    return (1.0 - MARGIN) * gb * 1e9


@dataclass(frozen=True)
class RunMemory:
    """One pretraining run's memory, in bytes, with and without activation checkpointing."""

    run_id: str
    batch_size: int
    seq_len: int
    grad_accum: int
    checkpointing: bool          # what the profile sets for the run
    weights: int
    gradients: int
    optimizer: int
    activations: tuple[int, int]  # left for the backward when the forward ends: (plain, checkpointed)
    step_peak: tuple[int, int]    # most bytes beyond weights, gradients and optimizer: (plain, checkpointed)

    def peak(self, checkpointing: bool | None = None) -> int:
        """The run's peak; ``checkpointing`` None: as the profile trains it."""
        on = self.checkpointing if checkpointing is None else checkpointing
        return self.weights + self.gradients + self.optimizer + self.step_peak[int(on)]

    def fits(self, gb: float, checkpointing: bool | None = None) -> bool:
        return self.peak(checkpointing) <= usable_bytes(gb)


# ------------------------------------------------------------------------------------ extrapolation
def block_counts(config: ModelConfig) -> dict[str, int]:
    """How many blocks of each kind the model has (the kinds the extrapolation tells apart)."""
    if config.backbone == "transformer":
        return {"encoder": config.n_layers, "decoder": config.n_decoder_layers}
    if config.backbone == "qwen" and config.attention not in ("standard", "mha"):
        from leanlm.modeling.layouts import SIMPLE, layer_kinds

        kinds = layer_kinds(config.layout, config.n_layers)
        return {"simple": kinds.count(SIMPLE), "standard": len(kinds) - kinds.count(SIMPLE)}
    return {"block": config.n_layers}


def shallow_copies(config: ModelConfig) -> list[ModelConfig]:
    """Copies of ``config`` with 2-3 blocks whose block counts determine the constant and each kind's
    amount; every copy keeps the model's context (a Qwen model with simple layers keeps one). Not one
    block: the bottom block's backward is also the embedding's, so a one-block copy's peak can fall
    elsewhere in the step than a deep model's."""
    if config.backbone == "transformer":
        return [config.replace(n_layers=e, n_decoder_layers=d) for e, d in ((2, 2), (3, 2), (2, 3))]
    counts = block_counts(config)
    if "simple" in counts and counts["simple"] == 0:  # no simple layer: a standard model
        config = config.replace(attention="standard")
    if "simple" in counts and counts["simple"] and counts["standard"]:
        return [config.replace(n_layers=2, layout="uniform"), config.replace(n_layers=3, layout="uniform"),
                config.replace(n_layers=3, layout="last")]  # [s, s], [s, s, s], [s, s, standard]
    return [config.replace(n_layers=n, layout="uniform") for n in (2, 3)]


def extrapolate(config: ModelConfig, head: str, batch_size: int, seq_len: int, checkpointing: bool,
                mask_prob: float = 0.15, head_options: dict | None = None):
    """The step of the whole model from its shallow copies' steps: (activations, step peak), and the
    static bytes of the whole model. ``head_options``: the ``head`` model's keyword arguments (S+R's
    ``head_type``), as the run's pretraining builds it."""
    copies = shallow_copies(config)
    kinds = sorted({k for c in copies for k, n in block_counts(c).items() if n} | set(block_counts(config)))
    options = json.dumps(head_options or {}, sort_keys=True)
    measured = [_measured(_key(c), head, batch_size, seq_len, checkpointing, mask_prob, options) for c in copies]
    steps = [step for step, _ in measured]
    rows = np.array([[1.0] + [float(block_counts(c).get(k, 0)) for k in kinds] for c in copies])
    want = np.array([1.0] + [float(block_counts(config).get(k, 0)) for k in kinds])

    def whole(values) -> int:  # constant + amount per block of each kind, solved from the copies
        amounts, *_ = np.linalg.lstsq(rows, np.array([float(v) for v in values]), rcond=None)
        return int(round(float(want @ amounts)))

    # Each peak two ways: extrapolated itself (exact where it happens at the same point of the step at
    # every depth: e.g. with checkpointing, at the bottom block, after each block's recomputation has left
    # a little behind), and as its moment's extrapolation plus the largest excess a copy shows (exact
    # where the excess does not grow with depth: the loss chunk, one block's backward); the larger one.
    activations = whole(s.activations for s in steps)
    forward = max(whole(s.forward_peak for s in steps),
                  whole(s.forward_end for s in steps) + max(s.forward_peak - s.forward_end for s in steps))
    backward = max(whole(s.backward_peak for s in steps),
                   activations + max(s.backward_peak - s.activations for s in steps))
    # Parameters are a constant and a fixed number per block of each kind too (no block shares one).
    static = {part: whole(bytes_[part] for _, bytes_ in measured) for part in measured[0][1]}
    return activations, max(forward, backward), static


def _key(config: ModelConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


@functools.lru_cache(maxsize=None)
def _measured(config_key: str, head: str, batch_size: int, seq_len: int, checkpointing: bool, mask_prob: float,
              head_options: str = "{}"):
    """A shallow copy's step, from the disk cache (``<leanlm cache>/memory/``) when this code has measured
    it before: a measurement is a pure function of the model config, the micro-batch, the modelling code
    and torch, whose versions key the cache, so ``leanlm validate`` after ``leanlm budget`` (or a second
    validation) measures nothing again."""
    from leanlm.memory_probe import StepBytes, measure_step

    what = [config_key, head, batch_size, seq_len, checkpointing, mask_prob, code_version()]
    if head_options != "{}":  # the default head keeps its key (and the measurements already on disk)
        what.append(head_options)
    path = paths.cache_dir() / "memory" / f"{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        return StepBytes(**entry["step"]), {k: int(v) for k, v in entry["static"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass  # not measured yet (or an unreadable entry): measure
    config = ModelConfig.from_dict(json.loads(config_key))
    step, static = measure_step(config, head, batch_size, seq_len, checkpointing=checkpointing, mask_prob=mask_prob,
                                head_options=json.loads(head_options))
    try:
        write_json(path, {"step": dataclasses.asdict(step), "static": static})
    except OSError as exc:  # a read-only cache only costs time
        log.debug("memory estimate not cached at %s: %s", path, exc)
    return step, static


@functools.lru_cache(maxsize=None)
def code_version() -> str:
    """What a measurement depends on besides its inputs: the model library's sources, the probe's, torch."""
    import torch

    package = Path(__file__).resolve().parent
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted([*(package / "modeling").rglob("*.py"), package / "memory_probe.py"]):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# ------------------------------------------------------------------------------------ a profile's runs
def run_memory(run_id: str, head: str, model_config: ModelConfig, settings: dict, both: bool = True,
               head_options: dict | None = None) -> RunMemory:
    """The memory of a run training the ``head`` model of ``model_config`` (vocabulary included), built with
    ``head_options`` (:func:`leanlm.budget.head_options`), with its pretraining ``settings``; ``both``: with
    and without checkpointing, else as configured only (the other entry then repeats it)."""
    on = bool(settings.get("activation_checkpointing", False))
    mask_prob = float(settings.get("mask_prob", 0.15))
    results = {}
    for mode in ((False, True) if both else (on,)):
        results[mode] = extrapolate(model_config, head, settings["batch_size"], settings["seq_len"], mode,
                                    mask_prob, head_options)
    plain, checkpointed = results.get(False, results[on]), results.get(True, results[on])
    static = plain[2]
    return RunMemory(run_id, settings["batch_size"], settings["seq_len"], settings.get("grad_accum", 1), on,
                     static["weights"], static["gradients"], static["optimizer"],
                     (plain[0], checkpointed[0]), (plain[1], checkpointed[1]))


def memory_table(rows: list[RunMemory], gpu: str) -> str:
    """Markdown: every run's memory in GiB and whether it fits ``gpu`` as the profile trains it."""
    gb = gpu_memory_gb(gpu)
    if gb is None:
        raise ConfigError(f"--gpu {gpu!r}: its memory is unknown; one of {[name for name, _ in GPU_MEMORY_GB]}")
    g = lambda n: f"{n / GiB:,.1f}"  # noqa: E731
    lines = [f"Peak GPU memory per pretraining run, in GiB (bf16 autocast, AdamW, one micro-batch of "
             f"sequences x tokens; ckpt: activation checkpointing as the profile sets it; fits {gpu}: the run "
             f"as set at most {usable_bytes(gb) / GiB:,.1f} GiB, {1 - MARGIN:.0%} of {gb:g} GB; docs/memory.md):", "",
             "| run | micro-batch x accumulation | ckpt | weights+grads+AdamW | activations | peak "
             "| activations (ckpt) | peak (ckpt) | fits |",
             "|---|---:|:---:|---:|---:|---:|---:|---:|:---:|"]
    for r in rows:
        static = r.weights + r.gradients + r.optimizer
        lines.append(f"| {r.run_id} | {r.batch_size} x {r.seq_len} x {r.grad_accum} "
                     f"| {'yes' if r.checkpointing else 'no'} "
                     f"| {g(static)} | {g(r.activations[0])} | {g(r.peak(False))} | {g(r.activations[1])} "
                     f"| {g(r.peak(True))} | {'yes' if r.fits(gb) else 'NO'} |")
    return "\n".join(lines) + "\n"


def check_gpu_memory(config: dict, run_memories) -> list[str]:
    """Warnings (also logged) for the runs whose peak exceeds the profile's declared
    ``resources.pretrain.gpu_memory_gb`` as they are configured; none when no memory is declared.
    ``run_memories(config, both)`` gives the runs' :class:`RunMemory`."""
    gb = ((config.get("resources") or {}).get("pretrain") or {}).get("gpu_memory_gb")
    if not gb:
        return []
    warnings = []
    for r in run_memories(config, False):
        if not r.fits(gb):
            remedy = "" if r.checkpointing else " (or set activation_checkpointing: true)"
            warnings.append(
                f"{config['_params_file']}: run {r.run_id} needs about {r.peak() / GiB:,.1f} GiB of GPU memory at "
                f"its micro-batch of {r.batch_size} x {r.seq_len} (checkpointing {'on' if r.checkpointing else 'off'}), "
                f"more than {usable_bytes(gb) / GiB:,.1f} GiB ({1 - MARGIN:.0%} of resources.pretrain.gpu_memory_gb "
                f"= {gb:g}): lower its batch_size and raise grad_accum to keep the global batch{remedy}; docs/memory.md")
    for warning in warnings:
        log.warning(warning)
    return warnings
