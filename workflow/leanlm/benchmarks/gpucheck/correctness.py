"""Section 4: leanlm against its ``transformers`` twin on the device, and both against the CPU reference.

For each twin of :mod:`.reference` (a small BERT, ~300 MLM steps; a small standard Qwen decoder, ~200
causal-LM steps), the leanlm model and its Hugging Face twin (:mod:`leanlm.modeling.hf_twins`) start from
the same weights, train on the same batches with dropout 0, under bf16 autocast, through the same
training engine (AdamW, the same schedule and clipping). Recorded: both loss curves, the time per step of
each (:func:`timed_losses`) and four comparisons with the tolerances they were held to:

- ``logits``: each model's logits on the reference's probe row at its initial weights, under bf16 autocast,
  against the CPU fp32 ones, as ||difference|| / ||reference|| (the forward pass itself; near
  initialisation the losses are all close to ln V and could not tell two functions apart);
- ``vs_reference``: each model's first ``reference_steps`` losses against the CPU fp32 reference made
  beforehand (the bundle's; ``--tiny`` computes it afresh);
- ``first_steps``: leanlm against the twin over those same steps;
- ``curve``: the two curves' means over windows of a tenth of the run, relative difference, the worst
  window (the curves drift apart step by step under bf16 rounding, but must follow one trajectory).

``passed`` is all four within tolerance and every loss finite. ``learns``: the last window's mean loss is
below the first's.

Tolerances (relative; the measurements they stand on are beside them below): bf16 keeps 8 bits of
mantissa (about 0.4% per rounding), and a loss is a mean over thousands of rounded terms.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from leanlm.benchmarks.gpucheck import reference as ref

# Measured on the CPU in bf16 autocast against fp32 at the device's sizes (torch 2.11, transformers 5.17):
# logits 3.8e-3, first losses 4.6e-5 against the reference and 9e-6 between the twins, curves 6.3e-4 (BERT,
# 300 steps); a twin with its weights scaled by 1% gave logits 2.2e-2 apart (docs/gpu-check.md).
TOL_LOGITS = 2e-2      # bf16 logits vs the CPU fp32 ones, relative norm (bf16 operands: 1e-3 to 1e-2)
TOL_REFERENCE = 1e-2   # bf16 device losses vs the CPU fp32 reference, first steps
TOL_FIRST_STEPS = 1e-2  # leanlm vs twin, first steps, both bf16
TOL_CURVE = 1e-2       # leanlm vs twin, window means over the whole run
NEED_S, TINY_NEED_S = 30.0, 5.0
TINY_BUNDLE_NEED_S = 20.0  # making a tiny bundle: four data stages and the reference, on a CPU core


def window_means(losses: list[float], windows: int = 10) -> list[float]:
    size = max(1, len(losses) // windows)
    return [sum(losses[i:i + size]) / len(losses[i:i + size]) for i in range(0, len(losses) - size + 1, size)]


def untimed_steps(steps: int) -> int:
    """The warm-up steps left out of a twin's time per step: the first tenth of the run (at least one).
    On CUDA the twins train compiled, and the engine compiles before step 0, and a batch of a new shape (MLM's
    number of masked positions varies) recompiles within the first steps; the later steps are the
    steady state."""
    return max(1, steps // 10)


def timed_losses(model, spec: dict[str, Any], batch_at, steps: int, device: torch.device
                 ) -> tuple[list[float], dict[str, float | None]]:
    """``ref.losses_of``'s per-step losses (the same engine and settings), and the time per step of the
    steps after :func:`untimed_steps` (``ms_per_step``, the device synchronised at both ends of the window,
    ``leanlm.benchmarks.timing.timed_fit``) with step 0's wall time apart (``first_step_s``: the compile
    when compiled)."""
    from leanlm.benchmarks.timing import timed_fit

    # Compiled on CUDA, as a paper run trains (its 300 steps are too few for compile: auto to compile).
    config = ref.train_config(spec, steps, "bf16", compile=device.type == "cuda")
    seconds, _, first, trainer, _ = timed_fit(model, config, batch_at, untimed_steps(steps), device)
    return [float(x) for x in trainer.state.losses[:steps]], {"ms_per_step": 1000.0 * seconds,
                                                              "first_step_s": first}


def compare_twin(name: str, record: dict[str, Any], tensors: dict[str, torch.Tensor],
                 device: torch.device) -> dict[str, Any]:
    """Train leanlm and its twin on ``device`` (the engine's); the curves and the four comparisons."""
    from leanlm.modeling.hf_twins import bert_twin, qwen2_twin

    spec = record["twins"][name]
    weights, rows, stored = ref.unpack(tensors)
    steps, k = spec["steps"], spec["reference_steps"]

    def batches():
        return ref.TwinBatches(spec, rows, record["special_ids"], record["mask_id"], stored)

    # The device builds the later batches itself: do its first ones equal the stored ones?
    probe = batches()
    rebuilt_equal = all(torch.equal(probe.built(step)[key], batch[key])
                        for step, batch in stored.items() for key in batch)
    ours = ref.build(spec, weights)
    twin = (qwen2_twin if name == "qwen" else bert_twin)(ref.build(spec, weights))
    probe, reference_logits = tensors["probe/ids"].long(), tensors["probe/logits"]
    logits = max(ref.relative_error(ref.probe_logits(model, probe, device, "bf16"), reference_logits)
                 for model in (ours, twin))
    losses, timing = timed_losses(ours, spec, batches(), steps, device)
    twin_losses, twin_timing = timed_losses(twin, spec, batches(), steps, device)

    reference = spec["cpu_fp32_losses"]
    vs_ref = max(ref.max_rel_diff(losses[:k], reference), ref.max_rel_diff(twin_losses[:k], reference))
    first = ref.max_rel_diff(losses[:k], twin_losses[:k])
    mine, theirs = window_means(losses), window_means(twin_losses)
    curve = ref.max_rel_diff(mine, theirs)
    finite = all(math.isfinite(x) for x in losses + twin_losses)
    return {
        "steps": steps, "batch_size": spec["batch_size"], "seq_len": spec["seq_len"], "model": spec["model"],
        "reference_steps": k, "rebuilt_batches_equal_stored": rebuilt_equal,
        "losses": losses, "twin_losses": twin_losses, "cpu_fp32_reference": reference,
        "timed_steps": steps - untimed_steps(steps), **timing, **{f"twin_{k}": v for k, v in twin_timing.items()},
        "window_means": mine, "twin_window_means": theirs,
        "logits": {"rel_error": logits, "tolerance": TOL_LOGITS, "ok": logits <= TOL_LOGITS},
        "vs_reference": {"max_rel_diff": vs_ref, "tolerance": TOL_REFERENCE, "ok": vs_ref <= TOL_REFERENCE},
        "first_steps": {"max_rel_diff": first, "tolerance": TOL_FIRST_STEPS, "ok": first <= TOL_FIRST_STEPS},
        "curve": {"max_rel_diff": curve, "tolerance": TOL_CURVE, "ok": curve <= TOL_CURVE},
        "finite": finite,
        "learns": finite and mine[-1] < mine[0],
        "passed": (finite and logits <= TOL_LOGITS and vs_ref <= TOL_REFERENCE and first <= TOL_FIRST_STEPS
                   and curve <= TOL_CURVE),
    }


def section_correctness(section, ctx) -> None:
    """Section 4 (module docstring): the bundle's reference, then one sub-step per twin."""
    need = TINY_NEED_S if ctx.tiny else NEED_S
    # With --tiny and no --bundle the reference step makes the bundle first (data stages, reference).
    making = ctx.tiny and ctx.bundle is None and ctx.bundle_dir is None
    loaded = section.run("reference", lambda: _load(ctx), TINY_BUNDLE_NEED_S if making else 1.0)
    if loaded is None:
        for name in ref.TWINS:
            section.skip(f"twin/{name}", "no reference: see the 'reference' step")
        return
    for name in ref.TWINS:
        section.run(f"twin/{name}", lambda n=name: compare_twin(n, ctx.reference[0], ctx.reference[1][n], ctx.device),
                    need)


def _load(ctx) -> dict[str, Any]:
    bundle = ctx.require_bundle()
    ctx.reference = ref.load_reference(bundle.reference_dir)
    record = ctx.reference[0]
    if record["tiny"] != ctx.tiny:
        raise ValueError(f"the bundle's reference was made {'with' if record['tiny'] else 'without'} --tiny, "
                         f"the check runs {'with' if ctx.tiny else 'without'}; make the bundle again")
    return {"bundle": str(bundle.root), "fresh": bundle.fresh, "bundle_commit": bundle.record.get("commit"),
            "cpu_fp32_twin_max_rel_diff": {n: t["cpu_fp32_twin_max_rel_diff"] for n, t in record["twins"].items()},
            "cpu_fp32_twin_logits_rel_diff": {n: t["cpu_fp32_twin_logits_rel_diff"] for n, t in record["twins"].items()}}
