"""Our backbones against their ``transformers`` twins (``leanlm bench --parity``): the same model, the same
weights, the same batch, timed in turn in one process.

Two pairs, each at an equal config with our weights copied into the twin (the twins of
:mod:`leanlm.modeling.hf_twins`, which the GPU check trains too):

- ``decoder``: ch. 4's Standard decoder (:class:`~leanlm.modeling.qwen.QwenForCausalLM`, uniform layout)
  against ``Qwen2ForCausalLM``, at Table 4.10's 70M size (d 512, 6 layers of 8 heads, d_ff 2,048, Pythia's
  50,304 rows, untied). Each computes its causal-LM loss its own way, as in training (``labels`` given;
  ours with the loss alone, ``return_logits=False``, as leanlm's engine asks for it; the twin with
  ``use_cache=False``, since training keeps no KV cache).
- ``bert``: BERT-base (12 layers, d 768) with MLM against ``BertForMaskedLM``. Ours runs the vocabulary
  projection at the masked positions only (``masked_positions``, ~15% of tokens: the largest matmul of
  the model); ``BertForMaskedLM`` runs it at every position. Comparing those would time the head, not the
  implementations, so the twin gets the same restriction: its own body (``.bert``), then its own MLM head
  (``.cls``) on the masked rows of the body's output, then the same cross-entropy. Both sides then do
  the same arithmetic.

Before timing, each pair's losses are checked equal on one batch (dropout off): the pair is the same
function. A step is forward + loss + backward (the optimizer, identical for identical parameters, is
left out); gradients are set to None between steps, untimed. Pairs are timed in rounds, the order
alternating from round to round (A B, B A, ...), so drifting load hits both alike; each round gives one
paired ratio. On a CPU the clock is the process's CPU time (all threads), so waiting for a core on a
shared machine does not count; the report gives the median tokens per CPU-second of each side, the
median of the per-round ratios (ours / twin) and their range, and the load average before and after.
On CUDA the clock is wall time after a synchronize.

Peak memory: on a CPU each side runs in a fresh process of its own (spawned: no heap shared with this
one, glibc's mmap threshold fixed so that freed blocks leave the resident set), builds its model and
batch, takes one step, then the peak resident memory is reset (``/proc/self/clear_refs``) and a second
step taken: the peak over the resident memory before that step (activations, gradients, temporaries).
On CUDA, ``max_memory_allocated`` over one step, in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from leanlm.errors import ConfigError
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import loss_only_kwargs

PAIRS = ("decoder", "bert")
# Batch x sequence of each pair by default: 512 tokens a step, a few CPU-seconds per step and side.
DEFAULTS = {"decoder": {"batch_size": 2, "seq_len": 256}, "bert": {"batch_size": 4, "seq_len": 128}}
MASK_PROB = 0.15
SPECIAL_IDS = 5  # ids 0-4 stand for special tokens in the random rows, as in leanlm.benchmarks.pretraining
MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"  # glibc's setting, read when a process starts


def pair_config(pair: str, **overrides: Any) -> ModelConfig:
    """Our model config of ``pair`` (fields overridable, e.g. smaller for tests)."""
    if pair == "decoder":
        from leanlm.modeling.qwen_sizes import qwen_config

        return qwen_config("70M", **overrides)
    if pair == "bert":
        return ModelConfig.preset("base", **{"dropout": 0.1, "attention_dropout": 0.1, **overrides})
    raise ConfigError(f"bench --parity: unknown pair {pair!r}; one of {', '.join(PAIRS)} or all")


# ------------------------------------------------------------------------------------ the two sides
# The twins are leanlm.modeling.hf_twins' (the GPU check's too): our weights in transformers' models.
def _decoder_steps(ours, twin) -> tuple[Callable, Callable]:
    def our_loss(batch):  # the loss alone, as the engine's training step asks for it
        return ours(input_ids=batch["input_ids"], labels=batch["labels"], **loss_only_kwargs(ours))["loss"]

    def twin_loss(batch):  # Qwen2ForCausalLM's own loss (its config has use_cache=False: training)
        return twin(input_ids=batch["input_ids"], labels=batch["labels"])["loss"]

    return our_loss, twin_loss


def _bert_steps(ours, twin) -> tuple[Callable, Callable]:
    def our_loss(batch):  # the loss alone, as the engine's training step asks for it
        return ours(**batch, **loss_only_kwargs(ours))["loss"]

    def twin_loss(batch):  # BertForMaskedLM's body and head, the head at the masked rows only (docstring)
        sequence = twin.hf.bert(input_ids=batch["input_ids"]).last_hidden_state
        hidden = sequence.reshape(-1, sequence.size(-1)).index_select(0, batch["masked_positions"])
        targets = batch["labels"].reshape(-1).index_select(0, batch["masked_positions"])
        return F.cross_entropy(twin.hf.cls(hidden).float(), targets)

    return our_loss, twin_loss


def build_pair(pair: str, batch_size: int, seq_len: int, seed: int = 0,
               overrides: dict | None = None) -> dict[str, Any]:
    """Both models of ``pair`` (ours and the twin, same weights), a batch, and each side's loss function."""
    from leanlm.modeling.hf_twins import bert_twin, qwen2_twin
    from leanlm.modeling.models import build_model
    from leanlm.stages.packed_batches import CausalLMBatches, MLMBatches

    config = pair_config(pair, **(overrides or {}))
    if seq_len > config.max_position:
        raise ConfigError(f"bench --parity {pair}: seq_len={seq_len} exceeds the model's {config.max_position} "
                          f"positions")
    torch.manual_seed(seed)
    rows = torch.randint(SPECIAL_IDS, config.vocab_size, (batch_size, seq_len),
                         generator=torch.Generator().manual_seed(seed))
    if pair == "decoder":
        ours = build_model(config, "causal_lm")
        twin = qwen2_twin(ours)
        batch = CausalLMBatches(rows, batch_size=batch_size, grad_accum=1, seed=seed)(0, 0)
        losses = _decoder_steps(ours, twin)
    else:
        rows[:, 0], rows[:, -1] = 2, 3  # [CLS] ... [SEP]
        ours = build_model(config, "mlm")
        twin = bert_twin(ours)
        batch = MLMBatches(rows, list(range(SPECIAL_IDS)), mask_id=SPECIAL_IDS - 1, vocab_size=config.vocab_size,
                           batch_size=batch_size, grad_accum=1, mask_prob=MASK_PROB, seed=seed)(0, 0)
        losses = _bert_steps(ours, twin)
    return {"config": config, "models": (ours, twin), "batch": batch, "losses": losses}


def check_same_function(built: dict[str, Any], rtol: float = 1e-4) -> tuple[float, float]:
    """Both sides' losses on the batch, dropout off; ConfigError if they differ (not the same model)."""
    values = []
    for model, loss in zip(built["models"], built["losses"]):
        model.eval()
        with torch.no_grad():
            values.append(float(loss(built["batch"])))
        model.train()
    ours, twin = values
    if abs(ours - twin) > rtol * abs(twin):
        raise ConfigError(f"bench --parity: ours and the transformers twin compute different losses ({ours} vs "
                          f"{twin}); the pair is not the same model, so its timings would not compare")
    return ours, twin


# ---------------------------------------------------------------------------------------- timing
def _clock(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":
        def wall() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()
        return wall
    return time.process_time


def _step(model, loss_fn, batch) -> None:
    model.zero_grad(set_to_none=True)
    loss_fn(batch).backward()


def time_pair(built: dict[str, Any], steps: int, warmup: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds per step of each side (``ours``, ``twin``), ``steps`` rounds after ``warmup``, alternating."""
    clock = _clock(device)
    sides = list(zip(("ours", "twin"), built["models"], built["losses"]))
    seconds: dict[str, list[float]] = {"ours": [], "twin": []}
    for round_ in range(warmup + steps):
        for name, model, loss_fn in (sides if round_ % 2 == 0 else sides[::-1]):
            model.zero_grad(set_to_none=True)
            started = clock()
            loss_fn(built["batch"]).backward()
            elapsed = clock() - started
            if round_ >= warmup:
                seconds[name].append(elapsed)
    for model in built["models"]:
        model.zero_grad(set_to_none=True)
    return seconds


# ---------------------------------------------------------------------------------------- memory
def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def _memory_child(pair: str, side: int, batch_size: int, seq_len: int, overrides: dict | None, threads: int,
                  out) -> None:
    """In a fresh process: the peak resident memory of one step of side ``side`` (0 ours, 1 the twin)."""
    torch.set_num_threads(threads)
    # Both models are built in either process (the twin is made from ours); what is measured is what
    # the step adds to the memory already resident.
    built = build_pair(pair, batch_size, seq_len, overrides=overrides)
    model, loss_fn = built["models"][side], built["losses"][side]
    model.train()
    _step(model, loss_fn, built["batch"])  # first step: one-time allocations (gradients, caches)
    model.zero_grad(set_to_none=True)
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current resident size
    before = _rss_kib("VmRSS")
    _step(model, loss_fn, built["batch"])
    out.send((_rss_kib("VmHWM") - before) * 1024)
    out.close()


def peak_step_memory(pair: str, batch_size: int, seq_len: int, device: torch.device,
                     overrides: dict | None = None, built: dict | None = None) -> tuple[int, int] | None:
    """Bytes of (ours, twin) at the peak of a training step (module docstring); None where unmeasurable."""
    if device.type == "cuda":
        sizes = []
        for model, loss_fn in zip(built["models"], built["losses"]):
            _step(model, loss_fn, built["batch"])
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            start = torch.cuda.memory_allocated(device)
            _step(model, loss_fn, built["batch"])
            torch.cuda.synchronize(device)
            sizes.append(torch.cuda.max_memory_allocated(device) - start)
            model.zero_grad(set_to_none=True)
        return sizes[0], sizes[1]
    if not Path("/proc/self/clear_refs").exists():
        return None  # not Linux: no resettable peak to read
    spawn = multiprocessing.get_context("spawn")
    sizes = []
    for side in (0, 1):
        receive, send = spawn.Pipe(duplex=False)
        child = spawn.Process(target=_memory_child,
                              args=(pair, side, batch_size, seq_len, overrides, torch.get_num_threads(), send))
        # glibc serves large blocks from mmap and returns them when freed, but raises that threshold as
        # blocks are freed, after which freed memory stays resident and is reused without showing in the
        # peak. Fixed at its initial 128 KiB, the resident size follows the live tensors.
        saved = os.environ.get(MMAP_THRESHOLD)
        os.environ[MMAP_THRESHOLD] = "131072"
        try:
            child.start()
        finally:
            if saved is None:
                os.environ.pop(MMAP_THRESHOLD)
            else:
                os.environ[MMAP_THRESHOLD] = saved
        send.close()
        try:
            sizes.append(receive.recv())
        except EOFError:
            raise RuntimeError(f"bench --parity {pair}: the memory measurement's process failed "
                               f"(exit code {child.exitcode})") from None
        finally:
            child.join()
    return sizes[0], sizes[1]


# ---------------------------------------------------------------------------------------- report
def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def run_parity(pairs: list[str] | str = "all", steps: int = 5, warmup: int = 1, device: str = "cpu",
               batch_size: int | None = None, seq_len: int | None = None, memory: bool = True,
               overrides: dict | None = None) -> dict[str, Any]:
    """Time each pair (module docstring); returns the report."""
    if steps < 1 or warmup < 0:
        raise ConfigError(f"bench --parity needs steps >= 1 and warmup >= 0; got steps={steps}, warmup={warmup}")
    names = list(PAIRS) if pairs == "all" else [pairs] if isinstance(pairs, str) else list(pairs)
    for name in names:
        pair_config(name)  # unknown names fail before any work
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       "cpu" if device == "auto" else device)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})",
        "clock": "wall seconds (synchronized)" if dev.type == "cuda" else "process CPU seconds (all threads)",
        "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "transformers": _version("transformers"), "commit": _commit(), "steps": steps, "warmup": warmup,
        "load_before": list(os.getloadavg()), "pairs": {},
    }
    for name in names:
        sizes = {"batch_size": batch_size or DEFAULTS[name]["batch_size"], "seq_len": seq_len or DEFAULTS[name]["seq_len"]}
        built = build_pair(name, overrides=overrides, **sizes)
        for model in built["models"]:
            model.to(dev)
        built["batch"] = {k: v.to(dev) for k, v in built["batch"].items()}
        loss_ours, loss_twin = check_same_function(built)
        seconds = time_pair(built, steps, warmup, dev)
        tokens = sizes["batch_size"] * sizes["seq_len"]
        ratios = [twin / ours for ours, twin in zip(seconds["ours"], seconds["twin"])]  # per round
        mem = peak_step_memory(name, device=dev, overrides=overrides, built=built, **sizes) if memory else None
        report["pairs"][name] = {
            **sizes, "tokens_per_step": tokens, "twin": _twin_name(name), "loss_ours": loss_ours,
            "loss_twin": loss_twin, "seconds_ours": seconds["ours"], "seconds_twin": seconds["twin"],
            "tokens_per_s_ours": tokens / statistics.median(seconds["ours"]),
            "tokens_per_s_twin": tokens / statistics.median(seconds["twin"]),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "peak_memory_ours": None if mem is None else mem[0], "peak_memory_twin": None if mem is None else mem[1],
            "params": sum(p.numel() for p in built["models"][0].parameters()),
        }
        del built
    report["load_after"] = list(os.getloadavg())
    return report


def _twin_name(pair: str) -> str:
    return "Qwen2ForCausalLM" if pair == "decoder" else "BertForMaskedLM (body + its MLM head at the masked rows)"


def _version(package: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001 - a version is only reported
        return None


def format_parity(report: dict[str, Any]) -> str:
    """The report as a few readable lines."""
    lines = [f"ours vs transformers on {report['device']}, {report['threads']} thread(s); clock: {report['clock']}; "
             f"{report['steps']} rounds after {report['warmup']} warm-up; load average "
             f"{report['load_before'][0]:.2f} -> {report['load_after'][0]:.2f}"]
    for name, r in report["pairs"].items():
        memory = ""
        if r["peak_memory_ours"] is not None:
            memory = (f"; step peak memory {r['peak_memory_ours'] / 2**20:,.0f} vs {r['peak_memory_twin'] / 2**20:,.0f} "
                      f"MiB ({r['peak_memory_ours'] / r['peak_memory_twin']:.2f}x)")
        lines.append(f"  {name} ({r['params'] / 1e6:.1f}M params, {r['batch_size']} x {r['seq_len']}) vs {r['twin']}: "
                     f"{r['tokens_per_s_ours']:,.0f} vs {r['tokens_per_s_twin']:,.0f} tokens/s, ratio "
                     f"{r['ratio']:.3f}x (rounds {r['ratio_min']:.3f}-{r['ratio_max']:.3f}){memory}; losses "
                     f"{r['loss_ours']:.4f} / {r['loss_twin']:.4f}")
    return "\n".join(lines)
