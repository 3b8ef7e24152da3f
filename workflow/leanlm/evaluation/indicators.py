"""Attention-pattern indicators (§4.4.4), pre-softmax logit distributions (Appendix 4.20) and
perplexity across context lengths (Appendix 4.10, Table 4.4).

The indicators are pure functions of attention probabilities ``A`` of shape ``(B, H, L, L)`` (rows are
queries, each row sums to one; causal maps are zero above the diagonal). Per head, over the ``L x L``
matrix, with the thesis's definitions:

- ENTROPY  ``H = -sum_a a log a`` over every entry (0 log 0 = 0): high means mean-pooling-like.
- CONC     ``||A||_F``: high means attention on few tokens.
- SINK     ``sum_i A[i, 0] / L``: the mean attention every query gives the first token.
- LOCFOC_N ``sum_i A[i, i-N] / (L - N)`` for N = 0..3: the mean attention at relative distance N.
- HEADDIV  (per layer) ``2 / (L (L+1)) * sum std_h(A_h)``: the position-wise standard deviation across
  heads (population std), summed over the causal triangle and averaged. Entries above the diagonal
  are zero in every head of a causal map, so summing over all ``L x L`` positions is the same.

The figures plot ENTROPY, CONC and HEADDIV min-max normalised and SINK, LOCFOC_N as absolute values
with LOCFOC_N doubled "for visibility" (§4.4 footnote 5): :func:`normalise_indicators`. Padding is not
handled: pass attention over full-length sequences.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import torch
from torch import nn

from leanlm.errors import DataError
from leanlm.evaluation.scoring import rolling_windows, score_windows

log = logging.getLogger(__name__)

LOCAL_DISTANCES = (0, 1, 2, 3)
INDICATORS = ("ENTROPY", "CONC", "HEADDIV", *(f"LOCFOC_{n}" for n in LOCAL_DISTANCES), "SINK")
MIN_MAX_NORMALISED = ("ENTROPY", "CONC", "HEADDIV")
CONTEXT_LENGTHS = (128, 256, 512, 1024, 2048)  # Table 4.4


def _check(attn: torch.Tensor, dims: int | None = None) -> torch.Tensor:
    if attn.dim() < 2 or attn.shape[-1] != attn.shape[-2] or (dims is not None and attn.dim() != dims):
        want = f"{dims}-D " if dims else ""
        raise DataError(f"attention probabilities must be a {want}tensor (..., L, L); got shape {tuple(attn.shape)}")
    return attn.float()


def entropy(attn: torch.Tensor) -> torch.Tensor:
    """ENTROPY of each ``L x L`` map: shape ``attn.shape[:-2]``."""
    attn = _check(attn)
    return -torch.special.xlogy(attn, attn).sum(dim=(-2, -1))


def concentration(attn: torch.Tensor) -> torch.Tensor:
    """CONC (Frobenius norm) of each ``L x L`` map."""
    return torch.linalg.matrix_norm(_check(attn), ord="fro")


def sink(attn: torch.Tensor) -> torch.Tensor:
    """SINK: the attention given to the first token, averaged over the ``L`` queries."""
    attn = _check(attn)
    return attn[..., :, 0].mean(dim=-1)


def local_focus(attn: torch.Tensor, distance: int) -> torch.Tensor:
    """LOCFOC_N for N = ``distance``: the mean of the N-th subdiagonal (``L - N`` entries)."""
    attn = _check(attn)
    if not 0 <= distance < attn.shape[-1]:
        raise DataError(f"LOCFOC distance {distance} needs 0 <= N < L = {attn.shape[-1]}")
    return torch.diagonal(attn, offset=-distance, dim1=-2, dim2=-1).mean(dim=-1)


def head_diversity(attn: torch.Tensor) -> torch.Tensor:
    """HEADDIV of each layer map ``(B, H, L, L)`` -> ``(B,)``; 0 for a single head."""
    attn = _check(attn, dims=4)
    length = attn.shape[-1]
    if attn.shape[1] < 2:
        return attn.new_zeros(attn.shape[0])
    spread = attn.std(dim=1, unbiased=False)  # (B, L, L): position-wise std across heads
    return spread.sum(dim=(-2, -1)) * 2 / (length * (length + 1))


def attention_indicators(attn: torch.Tensor, distances: Sequence[int] = LOCAL_DISTANCES) -> dict[str, torch.Tensor]:
    """Every indicator of one layer's attention ``(B, H, L, L)``, averaged over the batch.

    Per-head indicators have shape ``(H,)``; HEADDIV, a property of the layer, is a 0-d tensor.
    """
    attn = _check(attn, dims=4)
    out = {
        "ENTROPY": entropy(attn).mean(dim=0),
        "CONC": concentration(attn).mean(dim=0),
        "HEADDIV": head_diversity(attn).mean(),
    }
    for n in distances:
        out[f"LOCFOC_{n}"] = local_focus(attn, n).mean(dim=0)
    out["SINK"] = sink(attn).mean(dim=0)
    return out


def layer_indicators(attn: torch.Tensor, distances: Sequence[int] = LOCAL_DISTANCES) -> dict[str, float]:
    """One number per indicator for a layer (per-head values averaged over heads): a row of Figure 4.1."""
    return {name: float(value.mean()) for name, value in attention_indicators(attn, distances).items()}


def normalise_indicators(rows: Sequence[dict[str, float]], locfoc_scale: float = 2.0) -> list[dict[str, float]]:
    """Rows (layers, of one or several models) as the figures show them: ENTROPY, CONC and HEADDIV
    min-max normalised across ``rows`` (0 when all rows agree), SINK as is, LOCFOC_N times ``locfoc_scale``."""
    rows = [dict(r) for r in rows]
    for name in MIN_MAX_NORMALISED:
        values = [r[name] for r in rows if name in r]
        if not values:
            continue
        low, high = min(values), max(values)
        for r in rows:
            if name in r:
                r[name] = (r[name] - low) / (high - low) if high > low else 0.0
    for r in rows:
        for name in r:
            if name.startswith("LOCFOC_"):
                r[name] = r[name] * locfoc_scale
    return rows


# ------------------------------------------------------------------ pre-softmax logits (Figure 4.2/4.6)
def logit_histogram(
    pre_softmax: torch.Tensor,
    bins: int | Sequence[float] = 50,
    *,
    causal: bool = True,
    magnitude: bool = False,
) -> dict:
    """Histogram and summary of raw attention logits (the activations before softmax).

    ``pre_softmax``: any tensor; when ``causal`` and its last two dimensions are square (query x key),
    only the entries on or below the diagonal count (the others are masked, not computed by the model).
    Non-finite entries (masks written as -inf) are left out and counted. ``bins``: a number of equal
    bins over the observed range, or explicit edges (values outside them are counted as below/above).
    ``magnitude``: histogram ``|x|`` (Figure 4.2 compares magnitudes, with outliers beyond 10^3).
    """
    values = pre_softmax.detach().float()
    if causal and values.dim() >= 2 and values.shape[-1] == values.shape[-2]:
        keep = torch.ones(values.shape[-2:], dtype=torch.bool, device=values.device).tril()
        values = values[..., keep]
    values = values.reshape(-1).cpu()
    finite = torch.isfinite(values)
    n_nonfinite = int((~finite).sum())
    values = values[finite]
    if magnitude:
        values = values.abs()
    if values.numel() == 0:
        raise DataError("logit_histogram: no finite pre-softmax values to count")
    if isinstance(bins, int):
        if bins < 1:
            raise DataError(f"logit_histogram: bins={bins} must be at least 1")
        low, high = float(values.min()), float(values.max())
        if high == low:
            low, high = low - 0.5, high + 0.5
        edges = torch.linspace(low, high, bins + 1)
    else:
        edges = torch.tensor(list(bins), dtype=torch.float32)
        if edges.numel() < 2 or bool((edges[1:] <= edges[:-1]).any()):
            raise DataError(f"logit_histogram: bin edges must be at least two increasing numbers, got {list(bins)}")
    counts, _ = torch.histogram(values, bins=edges)
    return {
        "edges": edges.tolist(),
        "counts": [int(c) for c in counts.tolist()],
        "below": int((values < edges[0]).sum()),
        "above": int((values > edges[-1]).sum()),
        "n": int(values.numel()),
        "n_nonfinite": n_nonfinite,
        "min": float(values.min()),
        "max": float(values.max()),
        "abs_max": float(values.abs().max()),
        "mean": float(values.mean()),
        "std": float(values.std(unbiased=False)),
    }


# ------------------------------------------------------------------ context length (Table 4.4)
def _documents(token_ids) -> list[list[int]]:
    if isinstance(token_ids, torch.Tensor):
        if token_ids.dim() == 1:
            return [token_ids.tolist()]
        if token_ids.dim() == 2:
            return token_ids.tolist()
        raise DataError(f"token_ids must be 1-D (one text) or 2-D (one text per row); got shape {tuple(token_ids.shape)}")
    token_ids = list(token_ids)
    if token_ids and isinstance(token_ids[0], int):
        return [token_ids]
    return [list(t.tolist() if isinstance(t, torch.Tensor) else t) for t in token_ids]


def context_length_perplexity(
    model: nn.Module,
    token_ids,
    lengths: Sequence[int] = CONTEXT_LENGTHS,
    *,
    prefix_token_id: int | None = None,
    n_units: int | None = None,
    batch_size: int = 8,
    device: torch.device | str | None = None,
    per_document: dict | None = None,
) -> dict[int, float]:
    """Perplexity of ``token_ids`` when the model sees at most ``L`` tokens, for each ``L`` in ``lengths``.

    ``token_ids``: one text (a 1-D sequence of ids) or several (a list of them, or a 2-D tensor), each
    scored on its own with lm-eval's disjoint rolling windows of ``L`` tokens (every token predicted
    once, the last window given full context), as lm-eval does for WikiText at ``max_length=L``. With
    ``prefix_token_id`` every token is predicted after that prefix; without, each text's first token
    is the context of the rest and is not scored. Perplexity is ``exp(total NLL / n_units)``;
    ``n_units`` defaults to the number of predicted tokens (pass the number of words for a word-level
    perplexity like Table 4.4's). Lengths beyond the model's ``config.max_position`` are left out with
    a warning; the model is put in eval mode. ``per_document``, when given a dict, receives for each
    length the negative log-likelihood of each text (in the order given; 0 for a text with nothing to
    predict), whose sum over texts is the total above.
    """
    all_docs = _documents(token_ids)
    kept = [i for i, d in enumerate(all_docs) if len(d) > (0 if prefix_token_id is not None else 1)]
    docs = [all_docs[i] for i in kept]
    if not docs:
        raise DataError("context_length_perplexity: no text with a token to predict")
    model.eval()
    limit = getattr(getattr(model, "config", None), "max_position", None)
    out: dict[int, float] = {}
    for length in lengths:
        if limit is not None and length > limit:
            log.warning("context length %d exceeds the model's max_position %d; left out", length, limit)
            continue
        windows, owner = [], []
        for i, doc in zip(kept, docs):
            prefix, body = (prefix_token_id, doc) if prefix_token_id is not None else (doc[0], doc[1:])
            doc_windows = rolling_windows(body, prefix, length)
            windows.extend(doc_windows)
            owner.extend([i] * len(doc_windows))
        predicted = sum(len(w[1]) for w in windows)
        logprobs = [logprob for logprob, _ in score_windows(model, windows, length, batch_size, device)]
        total = sum(logprobs)
        out[int(length)] = math.exp(-total / (n_units if n_units is not None else predicted))
        if per_document is not None:
            nll = [0.0] * len(all_docs)
            for i, logprob in zip(owner, logprobs):
                nll[i] -= logprob
            per_document[int(length)] = nll
    return out
