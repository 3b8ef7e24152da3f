"""Log-likelihood scoring of token windows with a causal LM: the shared core of the lm-eval adapter
and of the context-length perplexity of Table 4.4.

A *window* is ``(context, continuation)``, two lists of token ids: the model reads
``(context + continuation)[:-1]`` (cut from the left to ``max_length`` tokens) and the continuation
tokens are scored at the last ``len(continuation)`` positions. This is lm-eval's own convention, so
:func:`rolling_windows` reproduces its perplexity scheme token for token.

The model protocol is the project's causal LM: ``model(input_ids=LongTensor[B, L],
attention_mask=LongTensor[B, L] | None)`` returning ``{"logits": FloatTensor[B, L, V]}``.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from leanlm.errors import DataError

IGNORE = -100  # target id of unscored positions (cross_entropy's ignore_index)
Window = tuple[Sequence[int], Sequence[int]]


def rolling_windows(tokens: Sequence[int], prefix_token_id: int, max_length: int) -> list[Window]:
    """Disjoint windows that score every token of ``tokens`` exactly once, each with as much context as fits.

    The first window reads ``[prefix] + tokens[:max_length - 1]`` and scores ``tokens[:max_length]``;
    every later window scores the next ``max_length`` tokens, and the last one (which may score fewer)
    is given the preceding tokens as context so that it still reads a full ``max_length`` tokens. This
    is lm-eval's ``get_rolling_token_windows(context_len=1)`` + ``make_disjoint_window``, the scheme
    behind every WikiText perplexity it reports.
    """
    if max_length < 1:
        raise DataError(f"max_length={max_length}: a window must hold at least one token")
    tokens = list(tokens)
    if not tokens:
        return []
    first = min(max_length, len(tokens))
    windows: list[Window] = [([prefix_token_id], tokens[:first])]
    done = first
    while done < len(tokens):
        end = done + min(max_length, len(tokens) - done)
        # done >= max_length here, so the context start end - max_length - 1 is never negative.
        windows.append((tokens[end - max_length - 1 : done], tokens[done:end]))
        done = end
    return windows


def output_logits(output) -> torch.Tensor:
    """The logits of a model output: the project's dict, a bare tensor, or an object with ``.logits``."""
    if isinstance(output, dict):
        return output["logits"]
    if isinstance(output, torch.Tensor):
        return output
    return output.logits


def model_device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _model_input(window: Window, max_length: int) -> tuple[list[int], int]:
    context, continuation = list(window[0]), list(window[1])
    if not continuation:
        raise DataError("a scored window needs at least one continuation token")
    if len(continuation) > max_length:
        raise DataError(f"a continuation of {len(continuation)} tokens does not fit the model's context of "
                        f"{max_length} tokens; score it with rolling windows instead")
    if not context:
        raise DataError("a scored window needs at least one context token (use the prefix token for an empty context)")
    full = context + continuation
    return full[-(max_length + 1):][:-1], len(continuation)


@torch.no_grad()
def score_windows(
    model: nn.Module,
    windows: Sequence[Window],
    max_length: int,
    batch_size: int = 8,
    device: torch.device | str | None = None,
    pad_token_id: int = 0,
) -> list[tuple[float, bool]]:
    """``(log-likelihood of the continuation, whether greedy decoding would produce it)`` per window.

    Windows are run longest first (padding is then minimal, and an out-of-memory error shows in the
    first batch, not the last), right-padded: a causal model never lets a padded position influence
    an earlier one, so the scores do not depend on the batch a window lands in. Results come back in
    the order of ``windows``.
    """
    if batch_size < 1:
        raise DataError(f"batch_size={batch_size} must be at least 1")
    device = torch.device(device) if device is not None else model_device(model)
    prepared = [_model_input(w, max_length) for w in windows]
    order = sorted(range(len(prepared)), key=lambda i: (-len(prepared[i][0]), prepared[i][0]))
    results: list[tuple[float, bool] | None] = [None] * len(prepared)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = len(prepared[chunk[0]][0])
        input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
        targets = torch.full((len(chunk), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, index in enumerate(chunk):
            ids, n_scored = prepared[index]
            window = windows[index]
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            targets[row, len(ids) - n_scored : len(ids)] = torch.tensor(list(window[1]), dtype=torch.long)
            mask[row, : len(ids)] = 1
        padded = bool((mask == 0).any())
        output = model(input_ids=input_ids.to(device), attention_mask=mask.to(device) if padded else None)
        logits = output_logits(output).float()
        targets = targets.to(device)
        # cross_entropy = -log_softmax at the target, 0 where ignored; no (B, L, V) log-prob tensor kept.
        # Flattened (B*L, V) rows: the (B, V, L) transpose is a strided view, about 3x slower on CPU.
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE,
                              reduction="none").view(targets.shape)
        logprob = (-nll).sum(dim=1).tolist()
        greedy = ((logits.argmax(dim=-1) == targets) | (targets == IGNORE)).all(dim=1).tolist()
        for row, index in enumerate(chunk):
            results[index] = (float(logprob[row]), bool(greedy[row]))
    return results  # type: ignore[return-value]
