"""Section 4's inputs: two small models, their batches, and a CPU fp32 reference of their first steps.

For each twin (a small BERT trained with MLM, a small standard Qwen decoder trained with causal LM), the
bundle holds, in ``reference/<twin>.safetensors``:

- ``weights/<name>``: the initial weights, drawn from a fixed seed and rounded to bf16 (stored in bf16,
  loaded as the fp32 numbers they are exactly), so the device starts from the very weights the reference
  started from, whatever its random number generators draw;
- ``rows``: the packed token rows of every step (the bundle's corpus through the profile's tokenizer and
  the pipeline's [CLS]/[SEP] packing), ``batch_size`` per step in order, in 16 bits where the vocabulary fits;
- ``batch/<step>/<key>``: the exact batches of the first ``reference_steps`` steps (MLM masking draws from
  seeded CPU generators; stored, the reference's batches cannot drift with another torch's draws);
- ``probe/ids``, ``probe/logits``: one row of tokens and the initial model's fp32 logits at its first
  :data:`PROBE_POSITIONS` positions. Near initialisation every loss is close to ln(vocabulary) whatever
  the network computes, so the losses alone would pass a twin that computes another function; the
  logits would not.

and ``reference/reference.json`` the configurations, the training settings and the reference: the losses
of the first ``reference_steps`` steps, trained on the CPU in fp32 by the training engine, for leanlm and
for its transformers twin (equal to float rounding: checked when the bundle is made). Later steps' batches
are built on the device from ``rows`` by the same objective code, for both models alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from leanlm.modeling.config import ModelConfig
from leanlm.training.engine import TrainConfig, Trainer

REFERENCE_FILE = "reference.json"
SEED = 0
DATA_SEED = 1

# The twins at device size and at tiny size (the same code, small enough for a CPU core in seconds).
TWINS: dict[str, dict[str, Any]] = {
    "bert": {"head": "mlm", "model": dict(backbone="bert", n_layers=4, d_model=128, n_heads=2, head_dim=64,
                                          d_ff=512, max_position=128, type_vocab_size=2, attention="mha"),
             "batch_size": 32, "seq_len": 128, "steps": 300},
    "qwen": {"head": "causal_lm", "model": dict(backbone="qwen", n_layers=4, d_model=128, n_heads=2, head_dim=64,
                                                d_ff=384, max_position=128, type_vocab_size=0, attention="standard",
                                                layer_norm_eps=1e-6, tie_word_embeddings=False),
             "batch_size": 16, "seq_len": 128, "steps": 200},
}
TINY_SIZES = dict(n_layers=2, d_model=32, n_heads=2, head_dim=16, max_position=32)
TINY_RUN = {"bert": dict(d_ff=64, batch_size=4, seq_len=32, steps=12),
            "qwen": dict(d_ff=48, batch_size=4, seq_len=32, steps=8)}
REFERENCE_STEPS, TINY_REFERENCE_STEPS = 8, 3
# AdamW at a constant rate after a warm-up as long as the reference: the first steps' learning rates do
# not depend on the run's length, so the reference's steps are the device run's first steps.
TRAIN = dict(lr=1e-3, schedule="constant", weight_decay=0.01, adam_betas=(0.9, 0.999), adam_eps=1e-8,
             clip_norm=1.0, seed=SEED)
MASK_PROB = 0.15
PROBE_POSITIONS = 32


def twin_spec(name: str, tiny: bool, vocab_size: int, pad_id: int) -> dict[str, Any]:
    """The twin's model config fields and run sizes."""
    spec = TWINS[name]
    model = {**spec["model"], "vocab_size": vocab_size, "pad_token_id": pad_id, "dropout": 0.0,
             "attention_dropout": 0.0}
    run = {k: spec[k] for k in ("batch_size", "seq_len", "steps")}
    if tiny:
        model.update(TINY_SIZES, d_ff=TINY_RUN[name]["d_ff"])
        run.update({k: v for k, v in TINY_RUN[name].items() if k != "d_ff"})
    run["reference_steps"] = TINY_REFERENCE_STEPS if tiny else REFERENCE_STEPS
    return {"head": spec["head"], "model": model, **run}


def train_config(spec: dict[str, Any], steps: int, precision: str, compile: bool | str = "auto") -> TrainConfig:
    return TrainConfig(total_steps=steps, warmup_steps=spec["reference_steps"], precision=precision,
                       log_every=steps, progress=False, prefetch=0, desc=f"twin {spec['head']}", compile=compile,
                       **TRAIN)


def build(spec: dict[str, Any], weights: dict[str, torch.Tensor] | None = None):
    """The leanlm model of ``spec``; with ``weights``, loaded with them (every tensor but the tied aliases)."""
    from leanlm.modeling.models import build_model

    torch.manual_seed(SEED)
    model = build_model(ModelConfig.from_dict(spec["model"], where="gpu-check twin"), spec["head"])
    if weights is not None:
        missing, unexpected = model.load_state_dict({k: v.float() if v.is_floating_point() else v
                                                     for k, v in weights.items()}, strict=False)
        if set(missing) - aliases(model) or unexpected:
            raise ValueError(f"reference weights do not fit the twin model (missing "
                             f"{sorted(set(missing) - aliases(model))}, unexpected {sorted(unexpected)})")
    return model


def aliases(model) -> set[str]:
    """State-dict entries whose tensor an earlier entry already holds (tied weights: stored once)."""
    seen, out = set(), set()
    for key, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            out.add(key)
        seen.add(tensor.data_ptr())
    return out


def bf16_exact_weights(model) -> dict[str, torch.Tensor]:
    """Round every weight of ``model`` to bf16 in place; return them once each (aliases left out), in bf16."""
    tied = aliases(model)
    stored: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for key, tensor in model.state_dict().items():
            if key in tied:
                continue
            if tensor.is_floating_point():
                tensor.copy_(tensor.to(torch.bfloat16).float())
                stored[key] = tensor.to(torch.bfloat16).clone()
            else:
                stored[key] = tensor.clone()
    return stored


class TwinBatches:
    """``batch_at(step, micro)`` of a twin: the objective's own batch code over the step's rows (MLM masking
    from the pipeline's per-step generator; causal LM rows as they are), or the stored batch for a step the
    reference holds."""

    def __init__(self, spec: dict[str, Any], rows: torch.Tensor, special_ids: list[int], mask_id: int | None,
                 stored: dict[int, dict[str, torch.Tensor]] | None = None):
        from leanlm.stages.packed_batches import CausalLMBatches, MLMBatches

        self.spec, self.rows, self.stored = spec, rows, stored or {}
        self.size = spec["batch_size"]
        if spec["head"] == "mlm":
            self.objective = MLMBatches(rows, special_ids, mask_id, spec["model"]["vocab_size"], self.size, 1,
                                        MASK_PROB, DATA_SEED)
        else:
            self.objective = CausalLMBatches(rows, self.size, 1, DATA_SEED)

    def built(self, step: int, micro: int = 0) -> dict[str, torch.Tensor]:
        from leanlm.training.seeding import step_generator

        start = step * self.size % len(self.rows)
        rows = self.rows[torch.arange(start, start + self.size) % len(self.rows)]
        return self.objective.masked(rows, step_generator(DATA_SEED, step, micro))

    def __call__(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        return self.stored[step] if step in self.stored else self.built(step, micro)

    def varying_dims(self, batch: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
        """The objective's (MLM: the masked count), compiled as symbols (leanlm.training.compiling)."""
        return self.objective.varying_dims(batch) if hasattr(self.objective, "varying_dims") else {}


def _rows(data_dir: Path, spec: dict[str, Any], tokenizer) -> torch.Tensor:
    from leanlm.data.tokenizer import special_token_id
    from leanlm.training.eos_packing import sep_packed_rows

    packed = sep_packed_rows(tokenizer, data_dir / "corpus" / "train.jsonl", spec["seq_len"],
                             special_token_id(tokenizer, "cls"), special_token_id(tokenizer, "sep"),
                             "gpu-check twin rows")
    need = spec["steps"] * spec["batch_size"]
    return packed[torch.arange(need) % len(packed)]


def _row_dtype(spec: dict[str, Any]) -> torch.dtype:
    """Token ids stored in 16 bits where the vocabulary fits (the bundle's size), else 32."""
    return torch.int16 if spec["model"]["vocab_size"] <= 2**15 else torch.int32


@torch.no_grad()
def probe_logits(model, ids: torch.Tensor, device: torch.device, precision: str) -> torch.Tensor:
    """The model's logits at the probe's first positions, as fp32 on the CPU (training autocast)."""
    from leanlm.training.precision import training_autocast

    was = model.training
    model.to(device).eval()
    with training_autocast(precision, device):
        logits = model(input_ids=ids.to(device))["logits"]
    model.train(was)
    return logits[0, :PROBE_POSITIONS].float().cpu()


def losses_of(model, spec: dict[str, Any], batch_at: Callable, steps: int, precision: str) -> list[float]:
    """Per-step losses of ``steps`` steps of the training engine (the engine's device: cuda when visible)."""
    trainer = Trainer(model, train_config(spec, steps, precision), batch_at, None)
    trainer.fit()
    return [float(x) for x in trainer.state.losses[:steps]]


def build_reference(data_dir: Path, out_dir: Path, tiny: bool) -> dict[str, Any]:
    """Write ``out_dir/<twin>.safetensors`` and ``out_dir/reference.json`` from the bundle's prepared data
    (``data_dir``: corpus/ and tokenizer/); run on a CPU (the caller hides any GPU)."""
    from safetensors.torch import save_file

    from leanlm.data.tokenizer import load_tokenizer, special_token_id
    from leanlm.io import atomic_path, sha256_file, write_json
    from leanlm.modeling.hf_twins import bert_twin, qwen2_twin
    from leanlm.stages.packed_batches import special_token_ids

    tokenizer = load_tokenizer(data_dir / "tokenizer")
    special, mask_id = special_token_ids(tokenizer), special_token_id(tokenizer, "mask")
    pad = special_token_id(tokenizer, "pad") or 0
    record: dict[str, Any] = {"tiny": tiny, "train": {**TRAIN, "adam_betas": list(TRAIN["adam_betas"])},
                              "mask_prob": MASK_PROB, "data_seed": DATA_SEED, "special_ids": special,
                              "mask_id": mask_id, "twins": {}}
    for name in TWINS:
        spec = twin_spec(name, tiny, tokenizer.get_vocab_size(), pad)
        rows = _rows(data_dir, spec, tokenizer)
        model = build(spec)
        weights = bf16_exact_weights(model)
        k = spec["reference_steps"]
        batches = TwinBatches(spec, rows, special, mask_id)
        stored = {step: batches.built(step) for step in range(k)}
        twin_model = qwen2_twin(build(spec, weights)) if name == "qwen" else bert_twin(build(spec, weights))
        probe = rows[:1]
        logits = probe_logits(model, probe, torch.device("cpu"), "fp32")
        twin_logits = probe_logits(twin_model, probe, torch.device("cpu"), "fp32")
        losses = losses_of(model, spec, TwinBatches(spec, rows, special, mask_id, stored), k, "fp32")
        twin_losses = losses_of(twin_model, spec, TwinBatches(spec, rows, special, mask_id, stored), k, "fp32")
        tensors = {**{f"weights/{key}": t for key, t in weights.items()}, "rows": rows.to(_row_dtype(spec)),
                   **{f"batch/{step}/{key}": t for step, batch in stored.items() for key, t in batch.items()},
                   "probe/ids": probe, "probe/logits": logits}
        path = out_dir / f"{name}.safetensors"
        with atomic_path(path, suffix=".safetensors") as tmp:
            save_file({key: t.contiguous() for key, t in tensors.items()}, str(tmp))
        record["twins"][name] = {**spec, "file": path.name, "sha256": sha256_file(path),
                                 "cpu_fp32_losses": losses, "cpu_fp32_twin_losses": twin_losses,
                                 "cpu_fp32_twin_max_rel_diff": max_rel_diff(losses, twin_losses),
                                 "cpu_fp32_twin_logits_rel_diff": relative_error(twin_logits, logits)}
    write_json(out_dir / REFERENCE_FILE, record)
    return record


def load_reference(ref_dir: Path) -> tuple[dict[str, Any], dict[str, dict[str, torch.Tensor]]]:
    """``(reference.json, {twin: tensors})``; each file's SHA-256 is checked against the record."""
    from safetensors.torch import load_file

    from leanlm.io import sha256_file

    record = json.loads((ref_dir / REFERENCE_FILE).read_text(encoding="utf-8"))
    tensors = {}
    for name, twin in record["twins"].items():
        path = ref_dir / twin["file"]
        if sha256_file(path) != twin["sha256"]:
            raise ValueError(f"{path} is not the file {ref_dir / REFERENCE_FILE} records (SHA-256 differs); "
                             f"make the bundle again (make gpu-bundle)")
        tensors[name] = load_file(str(path))
    return record, tensors


def unpack(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor,
                                                       dict[int, dict[str, torch.Tensor]]]:
    """``(initial weights, rows, stored batches by step)`` of one twin's tensors (the probe is
    ``tensors["probe/ids"]``, ``tensors["probe/logits"]``)."""
    weights = {k.removeprefix("weights/"): v for k, v in tensors.items() if k.startswith("weights/")}
    stored: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("batch/"):
            _, step, name = key.split("/", 2)
            stored.setdefault(int(step), {})[name] = value
    return weights, tensors["rows"].long(), stored


def relative_error(found: torch.Tensor, reference: torch.Tensor) -> float:
    """||found - reference|| / ||reference|| (inf if anything is not finite)."""
    import math

    value = float((found.float() - reference.float()).norm() / reference.float().norm().clamp_min(1e-30))
    return value if math.isfinite(value) else math.inf


def max_rel_diff(a: list[float], b: list[float]) -> float:
    """Largest |a - b| / |b| over the steps both have (inf where a loss is not finite)."""
    import math

    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
    return worst
