"""What chapter 4's figures read from a trained model: attention indicators per layer and head
(Figures 4.1, 4.7, 4.8), pre-softmax logit histograms per layer (Figures 4.2, 4.6) and perplexity
across context lengths (Table 4.4), over held-out token sequences.

:func:`attention_profile` runs the sequences through the model inside ``model.capture_attention()``
(:class:`leanlm.modeling.qwen.QwenForCausalLM`), a batch at a time, and accumulates per layer:

- the indicators of :mod:`leanlm.evaluation.indicators` per head (ENTROPY, CONC, LOCFOC_0..3, SINK)
  and per layer (HEADDIV), averaged over the sequences; ``mean`` averages the heads. Maps shared by
  the whole batch (RndEmbQK, FixedSeqQK) count once per sequence like any other;
- a histogram of ``|logit|`` (the causal triangle of every head) over the fixed log-spaced edges
  :data:`LOGIT_EDGES` (0, then half decades from 1e-3 to 1e5: Figure 4.2 contrasts magnitudes below
  10^1 with outliers beyond 10^3), plus the signed minimum, maximum, mean and standard deviation.

Layers without a map (the MLP variant mixes no tokens) get ``None``. ``normalised`` gives the
figures' scaling (§4.4 footnote 5: ENTROPY, CONC, HEADDIV min-max normalised over this model's
layers, LOCFOC_N doubled, SINK as is); a figure that puts several models on one scale renormalises the
raw ``mean`` rows with :func:`leanlm.evaluation.indicators.normalise_indicators`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from leanlm.errors import DataError
from leanlm.evaluation.indicators import attention_indicators, logit_histogram, normalise_indicators
from leanlm.modeling.layouts import SIMPLE
from leanlm.modeling.qwen import simple_mixer_name

LOGIT_EDGES = [0.0] + [10.0 ** (k / 2) for k in range(-6, 11)]  # 0, 1e-3, 10^-2.5, ..., 1e5
PER_HEAD = ("ENTROPY", "CONC", "LOCFOC_0", "LOCFOC_1", "LOCFOC_2", "LOCFOC_3", "SINK")


def token_windows(documents: Sequence[Sequence[int]], prefix_token_id: int, length: int, count: int) -> torch.Tensor:
    """Up to ``count`` disjoint windows of ``length`` tokens, ``(N, length)``, from the documents in
    order, each document read after ``prefix_token_id`` (the start-of-text token lm-eval scores with)."""
    stream = [t for doc in documents for t in (prefix_token_id, *doc)]
    n = min(count, len(stream) // length)
    if n < 1:
        raise DataError(f"the held-out documents give {len(stream)} tokens, fewer than one window of {length}; "
                        f"lower indicator_tokens or evaluate more documents")
    return torch.tensor(stream[: n * length], dtype=torch.long).view(n, length)


class _Moments:
    """Count, sum and sum of squares, mergeable: the signed statistics of every logit seen."""

    def __init__(self):
        self.n, self.total, self.squares = 0, 0.0, 0.0
        self.low, self.high = math.inf, -math.inf

    def add(self, hist: dict) -> None:
        n = hist["n"]
        self.total += hist["mean"] * n
        self.squares += (hist["std"] ** 2 + hist["mean"] ** 2) * n
        self.n += n
        self.low, self.high = min(self.low, hist["min"]), max(self.high, hist["max"])

    def summary(self) -> dict:
        mean = self.total / self.n
        return {"n": self.n, "min": self.low, "max": self.high, "abs_max": max(abs(self.low), abs(self.high)),
                "mean": mean, "std": math.sqrt(max(self.squares / self.n - mean**2, 0.0))}


@torch.no_grad()
def attention_profile(model: nn.Module, sequences: torch.Tensor, batch_size: int = 1) -> dict:
    """Per-layer indicators and logit histograms of ``model`` over ``sequences`` ``(N, L)`` (module docstring)."""
    if sequences.dim() != 2 or sequences.numel() == 0:
        raise DataError(f"attention_profile needs token sequences (N, L); got shape {tuple(sequences.shape)}")
    model.eval()
    device = next(model.parameters()).device
    n_layers = model.config.n_layers
    sums: dict[int, dict[str, torch.Tensor]] = {}
    counts: dict[int, torch.Tensor] = {}
    above: dict[int, int] = {}
    moments: dict[int, _Moments] = {}
    seen = 0
    for chunk in sequences.split(batch_size):
        with model.capture_attention() as store:
            model(input_ids=chunk.to(device))
        rows = len(chunk)
        seen += rows
        for layer, maps in store.items():
            values = attention_indicators(maps["probs"])
            acc = sums.setdefault(layer, {k: torch.zeros_like(v, device="cpu") for k, v in values.items()})
            for name, value in values.items():
                acc[name] += value.cpu() * rows
            hist = logit_histogram(maps["logits"], bins=LOGIT_EDGES, magnitude=True)
            counts[layer] = counts.get(layer, 0) + torch.tensor(hist["counts"])
            above[layer] = above.get(layer, 0) + hist["above"]  # |logit| beyond the last edge (1e5)
            moments.setdefault(layer, _Moments()).add(logit_histogram(maps["logits"], bins=1))
    kinds = getattr(model, "layer_kinds", ["standard"] * n_layers)
    simple = simple_mixer_name(model.config)
    mixers = [simple if kind == SIMPLE else "standard" for kind in kinds]
    layers, hist_layers = [], []
    for index in range(n_layers):
        entry = {"layer": index + 1, "kind": kinds[index], "mixer": mixers[index],
                 "skipped": index in getattr(model, "skip_layers", ())}
        if index in sums:
            mean_over_seq = {name: value / seen for name, value in sums[index].items()}
            entry["per_head"] = {name: mean_over_seq[name].tolist() for name in PER_HEAD}
            entry["mean"] = {name: float(value.mean()) for name, value in mean_over_seq.items()}
            hist_layers.append({"layer": index + 1, "mixer": mixers[index], "counts": counts[index].tolist(),
                                "above": above[index], **moments[index].summary()})
        else:
            entry["per_head"], entry["mean"] = None, None
        layers.append(entry)
    measured = [e for e in layers if e["mean"] is not None]
    normalised = normalise_indicators([e["mean"] for e in measured])
    return {
        "sequences": int(sequences.shape[0]),
        "tokens": int(sequences.shape[1]),
        "indicators": {"layers": layers,
                       "normalised": [{"layer": e["layer"], **n} for e, n in zip(measured, normalised)]},
        "logits": {"magnitude": True, "edges": LOGIT_EDGES, "layers": hist_layers},
    }
