"""Sections 2 and 3: training throughput through the real engine and input pipeline (``leanlm bench``).

Section 2: BERT-base MLM (the paper profile's ``ch3_encoder-mha`` and ``ch3_encoder-mhe_mul``) at the
paper's pretraining batch (128 x 512, read from params/paper.yaml), bf16 autocast, eager then compiled:
ms per step, tokens/s, MFU, peak memory (:func:`leanlm.benchmarks.pretraining.run_bench`, whose batches
are the MLM objective's own builder over packed random rows, built ahead by the prefetch thread).

Section 3: ch. 4's 500M decoder (``ch4_uniform-<mixer>``) at the paper's micro-batch (8 x 2048) for every
mixer, a few steps each; then each distinct mixer of the largest model the paper profile pretrains
(most parameters: the 1.7B decoders, at their micro-batch of 2 x 2048, the largest peak memory of the
profile by leanlm budget's estimate), mainly to catch out-of-memory: one warm-up step, then one timed
step. (A cold step is no throughput figure: on the H200 the Standard decoder's first step took 2104 ms,
cuDNN building its attention plans, against 292 ms for Non-approximate; it stays in ``first_step_s``.)

``--tiny`` runs the same sub-steps on the smoke profile's runs with tiny batches; on a CPU the compiled
sub-steps are recorded as skipped (inductor compiles for minutes on a CPU; tests/test_compile.py covers
compiled training there).
"""

from __future__ import annotations

from typing import Any

from leanlm.benchmarks.pretraining import FLOPS_COUNTED, run_bench

# Each sub-step's expected run (s), checked against the section's time left: the longest measured on the
# H200 (docs/results/gpu/2026-11-28-h200, call-1), rounded up. BERT-base eager 8.1 s (MHA; MHE-MUL 6.4);
# compiled 153.0 s (MHA; 58 s of it the first step); a 500M decoder 7.1 s (Approximate; 3.8-5.5 the
# others); a 1.7B decoder 5.2 s for its cold step alone (Standard; 2.4-3.5 the others), now with a warm
# step more (0.3 s). The profiled step (PROFILE_STEPS, below; after that check) adds about a second to
# the eager and 500M sub-steps, within the rounding. Tiny sub-steps need a few seconds of a CPU core. A
# compiled sub-step after the first expects what the first took instead (section_bert).
NEED_S = {"eager": 10.0, "compiled": 155.0, "decoder": 8.0, "largest": 8.0}
TINY_NEED_S = 3.0
SECTION2_RUNS = ("ch3_encoder-mha", "ch3_encoder-mhe_mul")
# Compiled, MHE-MUL first: the first GPU check compiled MHA (113.4 ms/step on the H200) and had no time
# left for MHE-MUL, ch. 3's own variant, which no GPU has timed compiled (eager it was the slower of the
# two, 164.9 against 140.6 ms, with fewer FLOPs). MHA's compiled figure is the one already on record.
COMPILED_RUNS = ("ch3_encoder-mhe_mul", "ch3_encoder-mha")
SECTION3_EXPERIMENT = "ch4_uniform"
KEPT_LOSSES = 20  # per-step losses kept in the record (the first ones; run_bench's own list is longer)
# One more step after the timed ones runs under torch.profiler (``kernel_profile`` in the sub-step's record:
# time by kind of kernel, the longest kernels; leanlm.benchmarks.kernel_profile): the first check could
# say how slow a step was but not where its time went. One step of the 500M decoder costs 0.2-1 s.
PROFILE_STEPS = 1


def _profile(ctx) -> str:
    from leanlm import paths

    return str(paths.params_dir() / ("smoke.yaml" if ctx.tiny else "paper.yaml"))


def _settings(params: str, run_id: str) -> dict[str, Any]:
    from leanlm.config import load_config
    from leanlm.runs import get_run, pretrain_settings

    config = load_config(params)
    return pretrain_settings(config, get_run(config, run_id))


def _bench(ctx, params: str, run_id: str, *, compile: bool, steps: int, warmup: int, loop_only: bool,
           batch_size: int | None = None, profile_steps: int = PROFILE_STEPS) -> dict[str, Any]:
    settings = _settings(params, run_id)
    batch = batch_size or settings["batch_size"]
    if ctx.tiny:
        batch = min(batch, 2)
    result = run_bench(params=params, run=run_id, batch_size=batch, seq_len=settings["seq_len"], steps=steps,
                       warmup=warmup, device=ctx.device.type, dtype="bf16", compile=compile, prefetch=2,
                       loop_only=loop_only, profile_steps=profile_steps)
    result["losses"] = result["losses"][:KEPT_LOSSES]
    result["paper_batch_size"] = settings["batch_size"]
    return result


def _need(ctx, kind: str) -> float:
    return TINY_NEED_S if ctx.tiny else NEED_S[kind]


def section_bert(section, ctx) -> None:
    """Section 2 (module docstring): both eager runs, then both compiled (:data:`COMPILED_RUNS`' order)."""
    params = _profile(ctx)
    steps, warmup = (2, 1) if ctx.tiny else (10, 3)
    section.note("flops_counted", FLOPS_COUNTED)
    section.note("profile", params)
    # Both eager runs first: a compile costs a minute or more, and the budget may not hold all four.
    for run_id in SECTION2_RUNS:
        section.run(f"{_attention(run_id)}_eager",
                    lambda r=run_id: _bench(ctx, params, r, compile=False, steps=steps, warmup=warmup,
                                            loop_only=False), _need(ctx, "eager"))
    need = _need(ctx, "compiled")
    for run_id in COMPILED_RUNS:
        step = f"{_attention(run_id)}_compiled"
        if ctx.tiny and ctx.device.type == "cpu":
            section.skip(step, "tiny CPU mode: torch.compile's inductor backend compiles for minutes on a "
                               "CPU (tests/test_compile.py covers compiled training there); runs on the device")
            continue
        # The loop alone (one model compiled once; the eager sub-step has the step-alone figures).
        section.run(step, lambda r=run_id: _bench(ctx, params, r, compile=True, steps=steps, warmup=warmup,
                                                  loop_only=True), need)
        done = section.doc["steps"][step]
        if done["status"] == "ok" and not ctx.tiny:
            need = done["seconds"]  # the same model size and compile: the next expects what this one took


def _attention(run_id: str) -> str:
    return run_id.split("-", 1)[1]


def largest_runs(params: str) -> list[str]:
    """The pretraining runs of the profile's largest model (most parameters, counted on the meta device;
    then most micro-batch tokens), one per distinct mixer, Standard first. (The profile's micro-batches
    are sized to its GPU's memory, docs/memory.md, so parameters x tokens no longer finds the largest.)"""
    from leanlm.budget import pretrain_budget
    from leanlm.config import load_config
    from leanlm.runs import pretrain_settings, runs

    config = load_config(params)
    sized = []
    for run in runs(config):
        if run.objective in ("mlm", "causal_lm") and not run.evaluate_from:
            settings = pretrain_settings(config, run)
            weight = (pretrain_budget(config, run).parameters, settings["batch_size"] * settings["seq_len"])
            sized.append((weight, run))
    top = max(weight for weight, _ in sized)
    chosen: dict[str, str] = {}
    for weight, run in sized:
        if weight == top:
            chosen.setdefault(run.model.get("attention", "mha"), run.run_id)
    return sorted(chosen.values(), key=lambda r: (not r.endswith("-standard"), r))


def section_decoder(section, ctx) -> None:
    """Section 3 (module docstring)."""
    from leanlm.modeling.mixers import CH4_VARIANTS

    params = _profile(ctx)
    steps, warmup = (1, 1) if ctx.tiny else (3, 2)
    section.note("flops_counted", FLOPS_COUNTED)
    section.note("profile", params)
    for mixer in CH4_VARIANTS:
        run_id = f"{SECTION3_EXPERIMENT}-{mixer}"
        section.run(mixer, lambda r=run_id: _bench(ctx, params, r, compile=False, steps=steps, warmup=warmup,
                                                   loop_only=True), _need(ctx, "decoder"))
    try:
        largest = largest_runs(params)
    except Exception as exc:  # noqa: BLE001 - recorded; the mixers above already ran
        section.skip("largest", f"could not pick the largest run: {type(exc).__name__}: {exc}")
        return
    section.note("largest_runs", largest)
    for run_id in largest:
        section.run(f"largest/{run_id}", lambda r=run_id: _bench(ctx, params, r, compile=False, steps=1,
                                                                 warmup=1, loop_only=True, profile_steps=0),
                    _need(ctx, "largest"))
