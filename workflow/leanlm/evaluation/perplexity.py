"""Perplexity of a causal LM over a long token stream with a sliding window (§3.4.5: stride 256).

A text longer than the model's context is read in windows of ``max_length`` tokens whose starts are
``stride`` tokens apart. Each window scores only the tokens the previous window did not score, so
every token (but the first, which has no context) is scored exactly once, with between
``max_length - stride`` and ``max_length - 1`` tokens of context. This is the standard evaluation of
fixed-length models (``transformers``' perplexity guide): ``stride == max_length`` gives disjoint
windows, smaller strides give more context at more compute.

Token i (i >= 1) is scored in the first window ``[b, e)`` with ``b < i < e``, conditioned on
``tokens[b:i]``; the first token of every window after the first is therefore scored by an
earlier window when ``stride < max_length``, and never when windows are disjoint (it has no context
inside its own window), as in the reference recipe.

The registered metric ``perplexity`` takes per-unit summed negative log-likelihoods (nats) as
predictions and per-unit token counts as references, and returns ``exp(sum nll / sum tokens)``:
perplexity is a corpus-level quantity, so units are pooled, never averaged. Unlike most metrics it is
not in 0..1 (and lower is better: ``metrics.LOWER_IS_BETTER``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from leanlm.errors import ConfigError, DataError
from leanlm.evaluation.metrics import METRICS
from leanlm.evaluation.protocol import THESIS_STRIDE

if TYPE_CHECKING:  # torch is imported where it runs (strided_perplexity), not with the metric
    import torch

IGNORE = -100


@METRICS.register("perplexity")
def perplexity(predictions: np.ndarray, references: np.ndarray) -> float:
    """``exp(sum(nll) / sum(tokens))`` of per-unit summed NLLs (predictions) and token counts (references)."""
    nll = float(np.sum(np.asarray(predictions, dtype=np.float64)))
    tokens = float(np.sum(np.asarray(references, dtype=np.float64)))
    if tokens <= 0:
        raise DataError("perplexity: no scored tokens (the token counts sum to 0)")
    return math.exp(nll / tokens)


def sliding_windows(n_tokens: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """``(begin, end, first_scored)`` of each window over ``n_tokens`` tokens.

    The window reads ``tokens[begin:end]`` and scores positions ``first_scored .. end - 1``.
    """
    if max_length < 2:
        raise ConfigError(f"max_length={max_length}: a window needs at least 2 tokens (a context and a target)")
    if not 1 <= stride <= max_length:
        raise ConfigError(f"stride={stride} must be in 1..max_length={max_length}: a larger stride would "
                          f"skip tokens between windows")
    windows, scored_until = [], 1  # token 0 has no context: never scored
    for begin in range(0, max(n_tokens - 1, 1), stride):
        end = min(begin + max_length, n_tokens)
        first = max(scored_until, begin + 1)
        if first < end:
            windows.append((begin, end, first))
            scored_until = end
        if end == n_tokens:
            break
    return windows


def strided_perplexity(model: "torch.nn.Module", token_ids: "torch.Tensor", max_length: int,
                       stride: int = THESIS_STRIDE, batch_size: int = 8) -> dict:
    """Perplexity of ``model`` on the 1-D stream ``token_ids`` with windows of ``max_length``, ``stride`` apart.

    ``model(input_ids=(B, L)) -> {"logits": (B, L, V)}`` is the project's causal-LM protocol. Windows
    run ``batch_size`` at a time; the last (shorter) window is right-padded, which a causal model
    never lets influence the real positions. Returns ``dict(nll, tokens, perplexity, windows,
    window_nll, window_tokens)``: the summed NLL in nats, the number of scored tokens (n - 1 when
    ``stride < max_length``), their perplexity, and the per-window sums the metric pools.

    torch is imported here, not with the module: the metric above is registered whenever task specs are
    read, which planning does.
    """
    import torch

    with torch.no_grad():
        return _strided(model, token_ids, max_length, stride, batch_size)


def _strided(model, token_ids, max_length: int, stride: int, batch_size: int) -> dict:
    import torch
    import torch.nn.functional as F

    token_ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
    if token_ids.numel() < 2:
        raise DataError(f"perplexity needs at least 2 tokens, got {token_ids.numel()}")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be at least 1")
    windows = sliding_windows(token_ids.numel(), max_length, stride)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    window_nll: list[float] = []
    window_tokens: list[int] = []
    try:
        for start in range(0, len(windows), batch_size):
            chunk = windows[start:start + batch_size]
            width = max(end - begin for begin, end, _ in chunk)
            inputs = torch.zeros((len(chunk), width), dtype=torch.long)
            targets = torch.full((len(chunk), width), IGNORE, dtype=torch.long)
            for row, (begin, end, first) in enumerate(chunk):
                inputs[row, :end - begin] = token_ids[begin:end]
                # Target at position p is the token at p + 1; scored tokens are first..end-1.
                targets[row, first - begin - 1:end - begin - 1] = token_ids[first:end]
            logits = model(input_ids=inputs.to(device))["logits"].float()
            nll = F.cross_entropy(logits.transpose(1, 2), targets.to(device), ignore_index=IGNORE,
                                  reduction="none").sum(dim=1)
            window_nll.extend(nll.double().cpu().tolist())
            window_tokens.extend(end - first for _, end, first in chunk)
    finally:
        model.train(was_training)
    total_nll, total_tokens = math.fsum(window_nll), sum(window_tokens)
    return {
        "nll": total_nll,
        "tokens": total_tokens,
        "perplexity": perplexity(np.array(window_nll), np.array(window_tokens)),
        "windows": len(windows),
        "window_nll": window_nll,
        "window_tokens": window_tokens,
    }
