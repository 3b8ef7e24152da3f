"""Throughput of pretraining (``leanlm bench``): batch building and the training step, measured apart.

What is timed is what a run does: the objective's own batch builder (``MLMBatches`` or
``CausalLMBatches`` of :mod:`leanlm.stages.pretrain`) over packed rows of random token ids, and the
training engine (:class:`~leanlm.training.engine.Trainer`: autocast, fused AdamW on CUDA, gradient
clipping, the background prefetcher, ``compile``). Three clocks, each after ``warmup`` untimed steps:

- ``batch_ms``: building one optimizer step's batches on the host (``batch_at`` + token count, and the
  copy into pinned memory on CUDA), inline, nothing else running;
- ``step_ms``: one optimizer step on batches built beforehand (host-to-device copy, forward, backward,
  clipping, AdamW), i.e. the device's share;
- ``loop_ms``: one step of the real loop, batches built as training builds them (``prefetch`` of them
  ahead in a background thread; ``--prefetch 0``: inline). With prefetching the loop approaches
  ``max(batch_ms, step_ms)`` where the host has a core to spare, without it ``batch_ms + step_ms``.

``tokens_per_s`` and ``mfu`` come from ``loop_ms`` (``step_tokens_per_s``, ``step_mfu`` from
``step_ms``); ``first_step_s`` is step 0's wall time from the start of ``fit`` (so it holds torch.compile's
compilation, which the engine's probe runs before step 0, when compiled). The
model is initialised on the device that trains it. Each clock starts and stops with the device
synchronised (:func:`timed_fit`): the timed window holds the work of its own steps, not the warm-up steps
the host had queued ahead of it.
Packed rows are held in memory here, where a run gathers them from a memory-mapped token stream; on
the dev machine the gather is a small part of ``batch_ms`` (the masking is most of it).

Which model: ``--run`` names a run of a profile (``--params``; its model, objective, sequence length,
vocabulary rows and masking rate), so the ch. 4 decoders are the paper profile's own ``qwen_500m``
(:data:`BENCH_CONFIGS`); or ``--size``/``--attention`` pick a BERT preset for MLM (BERT-base by default).

FLOPs per token (forward + backward) are the budget's accounting (:mod:`leanlm.budget`)::

    6 N  +  12 seq_len sum_layers(h_scores d_h)  +  6 V d f_out

N: non-embedding parameters; the second term softmax attention's QK^T and AV (Kaplan et al. 2020,
PaLM's MFU), for the score maps the variant computes (none for Approximate, whose Taylor-feature work
is therefore not counted: its MFU is a floor); the last the output projection at the predicted
positions (f_out: the masking rate for MLM, 1 for causal LM). Norms, activations and softmax are not
counted.

MFU = achieved FLOP/s over the device's dense peak *for the precision the matmuls ran in*
(:data:`PEAK_FLOPS`): bf16 autocast against the bf16 tensor-core peak, fp32 against the fp32 peak, or the
TF32 peak when torch lets fp32 matmuls use TF32 (``torch.backends.cuda.matmul.allow_tf32``). No MFU on
CPU (no peak is known for it) or on a GPU missing from the table.
"""

from __future__ import annotations

import resource
from typing import Any

import torch

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import (
    attention_blocks,
    model_attention_parameters,
    non_embedding_parameters,
    total_parameters,
)
from leanlm.modeling.heads import BertForMLM
from leanlm.modeling.models import build_model
from leanlm.training.engine import TrainConfig
from leanlm.training.prefetch import count_tokens, pinned
from leanlm.stages.packed_batches import CausalLMBatches, MLMBatches
from leanlm.benchmarks.timing import LoopBatches, Prebuilt, clock, timed_fit

# Dense (no sparsity) peak FLOP/s by precision, from NVIDIA's data sheets (the "Tensor Core" rows, whose
# starred values assume 2:4 sparsity and are halved here; FP32 is the non-tensor-core row):
#   H100 SXM / H200 SXM: H100 data sheet (nvidia.com/en-gb/data-center/h100, table "Technical
#     Specifications") and H200 data sheet: FP32 67 TF, TF32 989* -> 494, BF16/FP16 1,979* -> 989.
#   H100 PCIe: FP32 51, TF32 756* -> 378, BF16/FP16 1,513* -> 756.   H100 NVL: FP32 60, TF32 835* -> 417,
#     BF16/FP16 1,671* -> 835.
#   A100 (SXM and PCIe; A100 data sheet): FP32 19.5, TF32 156, BF16/FP16 312 (dense figures).
#   L40S: FP32 91.6, TF32 183, BF16/FP16 362.   L40: FP32 90.5, TF32 90.5, BF16/FP16 181.
#   L4: FP32 30.3, TF32 60, BF16/FP16 121.
# Matched as substrings of torch.cuda.get_device_name(), more specific names first ("H100 PCIe" before
# "H100"). An "H100 80GB HBM3" is the SXM part.
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp32": 51e12}),
    ("H100 NVL", {"bf16": 835e12, "fp16": 835e12, "tf32": 417e12, "fp32": 60e12}),
    ("H100", {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12}),
    ("H200", {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12}),
    ("L40", {"bf16": 181e12, "fp16": 181e12, "tf32": 90.5e12, "fp32": 90.5e12}),
    ("L4", {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12}),
)
# The bf16 column, for `leanlm budget --gpu` (which assumes bf16 training).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = tuple((name, peaks["bf16"]) for name, peaks in PEAK_FLOPS)

PRECISIONS = {"bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32"}

# Named configurations: a run of a profile (the paper's sizes) with the batch the docs measure.
# `leanlm bench --config NAME` is `--params PARAMS --run RUN --batch-size B --seq-len L`.
BENCH_CONFIGS: dict[str, dict[str, Any]] = {
    "bert_base_mha": {"params": "params/paper.yaml", "run": "ch3_encoder-mha", "batch_size": 32, "seq_len": 512},
    "bert_base_mhe_mul": {"params": "params/paper.yaml", "run": "ch3_encoder-mhe_mul", "batch_size": 32,
                          "seq_len": 512},
    # Ch. 4's decoders at 500M (Table 4.10's qwen_500m), Pythia's 50,304 rows, seq 2048 (Table 4.9).
    "ch4_standard_500m": {"params": "params/paper.yaml", "run": "ch4_uniform-standard", "batch_size": 8,
                          "seq_len": 2048},
    "ch4_approximate_500m": {"params": "params/paper.yaml", "run": "ch4_uniform-approximate", "batch_size": 8,
                             "seq_len": 2048},
}

# What flops_per_token counts, for reports that carry the number (the GPU check's JSON).
FLOPS_COUNTED = (
    "forward + backward per token: 6 x non-embedding parameters (every matmul weight); 12 x seq_len x the sum "
    "over layers of score maps x head dim (softmax attention's QK^T and AV; none for mixers without score "
    "maps: Approximate's Taylor features, Non-approximate, FNet, Linear and MLP count their weights only); "
    "6 x vocabulary x d_model x the predicted fraction (the LM head at the predicted positions: the masking "
    "rate for MLM, all positions for causal LM). Norms, activations, softmax and the loss are not counted."
)

SPECIAL_IDS = 5  # ids 0-4 stand for the special tokens of the random rows ([PAD], [UNK], [CLS], [SEP], [MASK])


def peak_flops(device_name: str, precision: str = "bf16") -> float | None:
    """The dense peak FLOP/s of a GPU by name for ``precision`` (bf16, fp16, tf32, fp32), or None."""
    for key, peaks in PEAK_FLOPS:
        if key.lower() in device_name.lower():
            return peaks.get(precision)
    return None


def matmul_precision(device: torch.device, precision: str) -> str:
    """The precision the matmuls run in: ``precision``, or tf32 for fp32 on CUDA when TF32 is allowed."""
    if precision == "fp32" and device.type == "cuda" and (
            torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"):
        return "tf32"
    return precision


def flops_per_token(model: BertForMLM, seq_len: int) -> int:
    """Training FLOPs per token of a BERT encoder's body at ``seq_len``: 6N + the attention-score term
    (the output projection is :func:`output_flops_per_token`'s)."""
    # Summed over blocks, so per-layer mixes of variants are counted layer by layer.
    score_heads = sum(block.score_heads for block in attention_blocks(model))
    return 6 * non_embedding_parameters(model) + 12 * seq_len * score_heads * model.config.head_dim


def training_flops_per_token(model, model_config: ModelConfig, objective: str, seq_len: int,
                             mask_prob: float) -> int:
    """The budget's FLOPs per token (module docstring) of ``model`` trained with ``objective``."""
    from leanlm.budget import output_flops_per_token, score_width

    return (6 * non_embedding_parameters(model) + 12 * seq_len * score_width(model)
            + output_flops_per_token(model_config, objective, {"mask_prob": mask_prob}))


def _resolve(device: str, dtype: str) -> tuple[torch.device, str]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r} asked for, but torch sees no CUDA device")
    if dev.type == "cpu" and torch.cuda.is_available():  # the engine trains on a visible GPU
        raise ConfigError("device='cpu' asked for, but the training engine uses the GPU torch sees; hide it with "
                          "CUDA_VISIBLE_DEVICES= to bench on the CPU")
    if dtype == "auto":
        dtype = "bf16" if dev.type == "cuda" else "fp32"
    if dtype not in PRECISIONS:
        raise ConfigError(f"dtype={dtype!r} is unknown; use one of {sorted(PRECISIONS)} or 'auto'")
    return dev, PRECISIONS[dtype]


def _model_from_run(params: str, run_id: str):
    """(model config, head, objective, the run's pretraining settings) of ``run_id`` in profile ``params``."""
    from leanlm.budget import _HEADS, _vocab_rows
    from leanlm.config import load_config
    from leanlm.runs import get_run, pretrain_settings

    config = load_config(params)
    run = get_run(config, run_id)
    if run.objective not in ("mlm", "causal_lm"):
        raise ConfigError(f"bench: run {run_id} pretrains with {run.objective!r}; the bench times mlm and "
                          f"causal_lm runs")
    settings = pretrain_settings(config, run)
    model_config = ModelConfig.from_dict({**run.model, "vocab_size": _vocab_rows(config, run, settings)},
                                         where=f"run {run_id}")
    return model_config, _HEADS[run.objective], run.objective, settings


def _batches(objective: str, model_config: ModelConfig, rows: torch.Tensor, batch_size: int, mask_prob: float):
    if objective == "mlm":
        return MLMBatches(rows, list(range(SPECIAL_IDS)), mask_id=SPECIAL_IDS - 1, vocab_size=model_config.vocab_size,
                          batch_size=batch_size, grad_accum=1, mask_prob=mask_prob, seed=0)
    return CausalLMBatches(rows, batch_size=batch_size, grad_accum=1, seed=0)


def _build(model_config: ModelConfig, head: str, device: torch.device, seed: int):
    """The model, initialised on the device that trains it (on a GPU a 1.7B model initialises in
    milliseconds, on the host in a minute). FixedSeqQK's fixed text is random ids here, as the rows are
    (a run reads a real document)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = build_model(model_config, head)
    if getattr(getattr(model, "model", None), "qk_stream", None) == "text":
        gen = torch.Generator().manual_seed(seed)
        model.set_fixed_sequence(torch.randint(SPECIAL_IDS, model_config.vocab_size, (model_config.max_position,),
                                               generator=gen))
    return model


def run_bench(size: str = "base", attention: str = "mha", batch_size: int = 32, seq_len: int = 128,
              steps: int = 20, device: str = "auto", dtype: str = "auto", *, warmup: int = 3,
              mask_prob: float = 0.15, compile: bool = False, prefetch: int = 2, seed: int = 0,
              params: str | None = None, run: str | None = None, build_only: bool = False,
              loop_only: bool = False, profile_steps: int = 0) -> dict[str, Any]:
    """Time pretraining steps (module docstring); returns the measurements.

    With ``run`` (and ``params``, the profile holding it) the model, objective and masking rate are that
    run's; otherwise a BERT ``size`` preset with ``attention`` trains MLM. ``dtype`` is the autocast
    precision (bf16 by default on CUDA, fp32 on CPU); weights and AdamW states stay fp32. ``build_only``
    times the batch building alone (no model: the host's side of a paper-size batch on any machine).
    ``loop_only`` skips the step on batches built beforehand (its ``step_*`` fields are None): one model
    built and, with ``compile``, compiled once instead of twice (the GPU check's large models).
    ``profile_steps`` more loop steps after the timed ones run under the profiler (``kernel_profile`` in
    the result; :mod:`leanlm.benchmarks.kernel_profile`).
    """
    if steps < 1 or warmup < 0 or batch_size < 1 or seq_len < 2 or prefetch < 0 or profile_steps < 0:
        raise ConfigError(f"bench needs steps>=1, warmup>=0, batch_size>=1, seq_len>=2, prefetch>=0, "
                          f"profile_steps>=0; got steps={steps}, warmup={warmup}, batch_size={batch_size}, "
                          f"seq_len={seq_len}, prefetch={prefetch}, profile_steps={profile_steps}")
    dev, precision = _resolve(device, dtype)
    if run is not None:
        model_config, head, objective, settings = _model_from_run(params or "params/paper.yaml", run)
        mask_prob = settings.get("mask_prob", mask_prob)
        label = f"run {run} ({params or 'params/paper.yaml'})"
    else:
        model_config = ModelConfig.preset(size, attention=attention, dropout=0.1, attention_dropout=0.1)
        head = objective = "mlm"
        label = f"BERT size={size} attention={attention}"
    if seq_len > model_config.max_position:
        raise ConfigError(f"seq_len={seq_len} exceeds the model's {model_config.max_position} positions")
    total = warmup + steps
    gen = torch.Generator().manual_seed(seed)
    # Packed rows as the objective reads them: [CLS] ... [SEP] for MLM, plain token ids for causal LM.
    def packed_rows(count: int) -> torch.Tensor:
        rows = torch.randint(SPECIAL_IDS, model_config.vocab_size, (count * batch_size, seq_len), generator=gen)
        if objective == "mlm":
            rows[:, 0], rows[:, -1] = 2, 3
        return rows

    batches = _batches(objective, model_config, packed_rows(total), batch_size, mask_prob)
    # The profiled steps read rows of their own, drawn after: the timed steps' batches are the same with
    # or without a profile (the builder's per-epoch order depends on how many rows it holds).
    profiled_batches = (_batches(objective, model_config, packed_rows(profile_steps), batch_size, mask_prob)
                        if profile_steps else None)

    loop_batches = LoopBatches(batches, profiled_batches, total)

    # 1. Batch building alone, on the host.
    pin = dev.type == "cuda"
    built, started = [], clock()
    for step in range(total):
        if step == warmup:
            started = clock()
        batch = batches(step, 0)
        count_tokens(batch)
        built.append(pinned(batch) if pin else batch)
    ended = clock()
    batch_seconds, batch_cpu = (ended[0] - started[0]) / steps, (ended[1] - started[1]) / steps
    head_fields = {"model": label, "run": run, "size": None if run else size, "attention": model_config.attention,
                   "objective": objective, "batch_size": batch_size, "seq_len": seq_len, "steps": steps,
                   "warmup": warmup, "batch_ms": 1000.0 * batch_seconds,
                   "batch_cpu_ms": 1000.0 * batch_cpu}
    if build_only:
        return {**head_fields, "build_only": True, "device": "cpu", "pinned": pin}

    model = _build(model_config, head, dev, seed)
    train_config = TrainConfig(total_steps=total, lr=1e-4, warmup_steps=0, weight_decay=0.01,
                               precision=precision, log_every=total, progress=False, prefetch=0, compile=compile,
                               desc="bench")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    step_seconds = step_cpu = None
    if not loop_only:
        # 2. The step on batches built beforehand. Its trainer (weights and AdamW moments on the device)
        # is dropped before the loop's model is built: peak memory is one run's, not two.
        step_seconds, step_cpu, _, trainer, _ = timed_fit(model, train_config, Prebuilt(built, batches), warmup,
                                                          dev)
        del trainer, model
        model = _build(model_config, head, dev, seed)  # a fresh model: the loop starts where the step did
    del built
    # 3. The loop as training runs it, batches built while it trains.
    loop_config = TrainConfig(**{**train_config.__dict__, "prefetch": prefetch,
                                 "total_steps": total + profile_steps, "log_every": total + profile_steps})
    loop_seconds, loop_cpu, first_step, loop_trainer, profiled = timed_fit(model, loop_config, loop_batches,
                                                                            warmup, dev, profile_steps)
    if dev.type == "cuda":
        peak_memory, memory_kind = torch.cuda.max_memory_allocated(dev), "cuda max_memory_allocated"
    else:
        peak_memory, memory_kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process peak RSS"

    tokens = batch_size * seq_len
    fpt = training_flops_per_token(model, model_config, objective, seq_len, mask_prob)
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    mm_precision = matmul_precision(dev, precision)
    peak = peak_flops(device_name, mm_precision) if dev.type == "cuda" else None
    return {
        **head_fields,
        "build_only": False,
        "device": device_name,
        "dtype": precision,
        "matmul_precision": mm_precision,
        "compile": compile,
        # Whether the timed loop really ran compiled: a failed compilation trains eagerly (engine fallback).
        "compiled": loop_trainer.compiled,
        "compile_fallback": loop_trainer.compile_fallback,
        # Graphs compiled for the timed loop: more than 1 is a recompilation inside it.
        "compiled_graphs": loop_trainer.summary()["compiled_graphs"],
        "prefetch": prefetch,
        "step_ms": 1000.0 * step_seconds if step_seconds is not None else None,
        "loop_ms": 1000.0 * loop_seconds,
        "first_step_s": first_step,
        # CPU seconds of the whole process per step (all threads): on a shared machine, what the work
        # cost, where the wall clocks above also hold the time spent waiting for a core.
        "step_cpu_ms": 1000.0 * step_cpu if step_cpu is not None else None,
        "loop_cpu_ms": 1000.0 * loop_cpu,
        "tokens_per_s": tokens / loop_seconds,
        "step_tokens_per_s": tokens / step_seconds if step_seconds else None,
        "peak_memory_bytes": int(peak_memory),
        "peak_memory_kind": memory_kind,
        "flops_per_token": fpt,
        "peak_flops": peak,
        "mfu": fpt * tokens / loop_seconds / peak if peak else None,
        "step_mfu": fpt * tokens / step_seconds / peak if peak and step_seconds else None,
        "params": total_parameters(model),
        "non_embedding_params": non_embedding_parameters(model),
        "attention_params": model_attention_parameters(model),
        "final_loss": float(loop_trainer.state.losses[total - 1]),
        "losses": [float(x) for x in loop_trainer.state.losses[:total]],
        "kernel_profile": profiled,
    }


def format_report(result: dict[str, Any]) -> str:
    """A few readable lines of a :func:`run_bench` result."""
    if result.get("build_only"):
        return (f"{result['objective']} batches, {result['model']}: batch {result['batch_size']} x seq "
                f"{result['seq_len']}, {result['steps']} timed after {result['warmup']} warm-up\n"
                f"  batch build {result['batch_ms']:.1f} ms/step wall, {result['batch_cpu_ms']:.1f} ms CPU"
                f"{' (pinned)' if result['pinned'] else ''}")
    def pct(value):
        return f"{100 * value:.1f}%" if value is not None else "n/a"

    def num(value, spec: str) -> str:  # a loop-only result has no step_* figures
        return format(value, spec) if value is not None else "n/a"

    why = "" if result.get("peak_flops") else " (no peak known for this device and precision)"
    return "\n".join([
        f"{result['objective']} pretraining, {result['model']} on {result['device']} "
        f"({result['dtype']}, matmuls in {result['matmul_precision']}{', compiled' if result.get('compiled') else ''})"
        + (f"; torch.compile failed, eager instead: {result['compile_fallback']}" if result.get("compile_fallback")
           else ""),
        f"  batch {result['batch_size']} x seq {result['seq_len']}, {result['steps']} timed steps "
        f"after {result['warmup']} warm-up, prefetch {result['prefetch']}",
        f"  batch build {result['batch_ms']:.1f} ms/step | step {num(result['step_ms'], '.1f')} ms | "
        f"loop {result['loop_ms']:.1f} ms/step (wall)",
        f"  CPU time: batch build {result['batch_cpu_ms']:.1f} | step {num(result['step_cpu_ms'], '.1f')} | "
        f"loop {result['loop_cpu_ms']:.1f} ms/step (all threads)",
        f"  {result['tokens_per_s']:,.0f} tokens/s (step alone {num(result['step_tokens_per_s'], ',.0f')}), "
        f"MFU {pct(result['mfu'])} (step alone {pct(result['step_mfu'])}){why}",
        f"  peak memory {result['peak_memory_bytes'] / 2**20:,.0f} MiB ({result['peak_memory_kind']})",
        f"  {result['flops_per_token'] / 1e6:,.2f} MFLOP/token; params {result['params']:,} "
        f"(non-embedding {result['non_embedding_params']:,}, attention {result['attention_params']:,})",
        f"  final loss {result['final_loss']:.3f}",
        *_profile_lines(result.get("kernel_profile")),
    ])


def _profile_lines(profiled: dict[str, Any] | None) -> list[str]:
    """The kernel profile's summary: time by kind, then the five longest operators."""
    if not profiled:
        return []
    kinds = ", ".join(f"{kind} {100 * v['share']:.0f}%" for kind, v in profiled["by_kind"].items())
    busy = profiled["busy_fraction"]
    lines = [f"  profile of {profiled['steps']} more step(s), {profiled['clock']}: "
             f"{profiled['busy_ms_per_step']:.1f} of {profiled['wall_ms_per_step']:.1f} ms/step busy"
             + (f" ({100 * busy:.0f}%)" if busy is not None else ""),
             f"    by kind: {kinds}"]
    lines += [f"    {op['ms_per_step']:8.2f} ms {100 * op['share']:4.1f}%  {op['kind']:<13} {op['name'][:90]}"
              for op in profiled["top"][:5]]
    return lines
