"""Vocabulary tables padded for the tensor cores (``ModelConfig.pad_vocab_to``), and what keeps the
padding invisible.

The output projection (hidden -> vocabulary) is the largest matmul of an LM; its vocabulary dimension
is a multiple of 64 only by chance (BERT's 30,522 rows, RoBERTa's 50,265, the translation BPE's
37,000), and GPU matmul kernels are fastest when it is one. So every vocabulary table a model builds
-- the word embedding an output head may be tied to, and the output head itself -- has
``config.vocab_rows`` rows: ``vocab_size`` rounded up to ``pad_vocab_to`` (default 64).

The padded rows are never seen:

- no token id reaches them (ids are below ``vocab_size``), so the embedding never reads them;
- the models return :func:`real_logits` (the first ``vocab_size`` columns, a view) and every loss,
  softmax and argmax reads those, so their logits take part in nothing and their gradient is 0;
- :func:`padding_parameters` counts them, and :mod:`leanlm.modeling.counting` leaves them out of every
  parameter count the tables print.

A table built here (:func:`vocab_table`) also loads a tensor of exactly ``vocab_size`` rows (a state
dict written without padding, e.g. by ``transformers``), filling the padded rows with zeros.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Attribute a vocabulary table carries: the vocabulary size its padded rows sit beyond.
REAL_ROWS = "real_vocab_rows"


def vocab_table(module: nn.Module, vocab_size: int) -> nn.Module:
    """Mark ``module`` (an nn.Embedding or nn.Linear whose parameters' first dimension is the padded
    vocabulary) as a vocabulary table of ``vocab_size`` real rows; returns it."""
    setattr(module, REAL_ROWS, int(vocab_size))
    module.register_load_state_dict_pre_hook(_pad_loaded_rows)
    return module


def _pad_loaded_rows(module: nn.Module, state_dict: dict, prefix: str, *_: object) -> None:
    """Load-time hook: a tensor with exactly the real rows gets zero rows appended up to the padded size
    (any other shape is left for load_state_dict to report)."""
    real = getattr(module, REAL_ROWS)
    for name, param in module.named_parameters(recurse=False):
        given = state_dict.get(prefix + name)
        if (isinstance(given, torch.Tensor) and given.ndim == param.ndim and given.shape[0] == real
                and param.shape[0] > real and given.shape[1:] == param.shape[1:]):
            pad = given.new_zeros((param.shape[0] - real, *given.shape[1:]))
            state_dict[prefix + name] = torch.cat([given, pad])


def padding_parameters(model: nn.Module) -> int:
    """Parameters in the padded rows of ``model``'s vocabulary tables, each tensor once (a tied
    embedding and head share one)."""
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        real = getattr(module, REAL_ROWS, None)
        if real is None:
            continue
        for param in module.parameters(recurse=False):
            if id(param) not in seen and param.shape[0] > real:
                seen.add(id(param))
                total += (param.shape[0] - real) * math.prod(param.shape[1:])
    return total


def unpadded_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` with every vocabulary table cut to its real rows (views), for formats that
    know nothing of the padding (the Hugging Face export)."""
    state = model.state_dict()
    for name, module in model.named_modules():
        real = getattr(module, REAL_ROWS, None)
        if real is None:
            continue
        for param_name, _ in module.named_parameters(recurse=False):
            key = f"{name}.{param_name}" if name else param_name
            if key in state:
                state[key] = state[key][:real]
    return state


def real_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The logits of the real vocabulary: the first ``vocab_size`` columns (a view, no copy)."""
    return logits if logits.size(-1) == vocab_size else logits[..., :vocab_size]
