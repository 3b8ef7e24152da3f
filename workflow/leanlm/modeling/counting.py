"""Parameter counting by the thesis's rules, from instantiated modules (never typed in).

Attention counts follow Table 3.13: weights only (every parameter whose name does not end in
``bias``), head embeddings included, the output projection included. The closed forms of Table 3.4
(:func:`attention_formula`) exclude the output projection, as that table says; each variant
carries its own formula (``qkv_parameter_formula``), so a new variant brings its row with it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from leanlm.modeling.attention import ATTENTION, Attention
from leanlm.modeling.vocab import padding_parameters


def attention_parameters(module: nn.Module) -> int:
    """Weights of one attention sublayer (biases excluded; head embeddings and W^O included)."""
    return sum(p.numel() for name, p in module.named_parameters() if not name.endswith("bias"))


def qkv_parameters(module: Attention) -> int:
    """Weights of one sublayer without the output projection: what Table 3.4's formulas count."""
    # Token mixers without an output projection (FNet: nn.Identity) have nothing to subtract.
    output = getattr(module.output, "weight", None)
    return attention_parameters(module) - (output.numel() if output is not None else 0)


def attention_blocks(model: nn.Module) -> list[Attention]:
    """Every attention sublayer in ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, Attention)]


def model_attention_parameters(model: nn.Module) -> int:
    """Sum of :func:`attention_parameters` over every attention block (Table 3.1's #params)."""
    return sum(attention_parameters(block) for block in attention_blocks(model))


def total_parameters(model: nn.Module) -> int:
    """All parameters, tied ones counted once (as ``transformers``' ``num_parameters()``), the rows a
    vocabulary table is padded with left out (they exist for the tensor cores only: leanlm.modeling.vocab)."""
    return sum(p.numel() for p in model.parameters()) - padding_parameters(model)


def embedding_parameters(model: nn.Module) -> int:
    """Rows of every nn.Embedding table (word, position, token type), each table once, padded
    vocabulary rows left out."""
    seen: set[int] = set()
    total = 0
    for m in model.modules():
        if isinstance(m, nn.Embedding) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            total += m.weight.numel() - padding_parameters(m)
    return total


def word_embedding_parameters(model: nn.Module) -> int | None:
    """Appendix 2.8's #Emb of a BERT-style model (its word embedding's own count), else None."""
    words = getattr(getattr(getattr(model, "encoder", None), "embeddings", None), "word_embeddings", None)
    count = getattr(words, "embedding_parameter_count", None)
    return int(count()) if callable(count) else None


def non_embedding_parameters(model: nn.Module) -> int:
    """Parameters outside the embedding tables (the N of 6N FLOPs per token)."""
    return total_parameters(model) - embedding_parameters(model)


def attention_formula(name: str, n: int, d: int) -> dict[str, Any]:
    """Table 3.4's row for attention ``name`` with n heads of dim d (d_m = n*d, W^O excluded).

    Returns ``dict(complexity, params, params_extra, latex)``: ``params_extra`` is the excess over
    SHA, computed from the two variants' formulas; ``latex`` holds the table's printed forms.
    """
    cls = ATTENTION.get(name)
    params = cls.qkv_parameter_formula(n, d)
    baseline = ATTENTION.get("sha").qkv_parameter_formula(n, d)
    return {
        "complexity": cls.complexity,
        "params": params,
        "params_extra": params - baseline,
        "latex": {
            "complexity": cls.complexity,
            "params": cls.params_latex,
            "params_extra": cls.params_extra_latex,
        },
    }


def attention_block_memory(weights: int, batch_size: int = 32, seq_len: int = 512,
                           d_model: int = 768) -> dict[str, int]:
    """Memory in bytes of one attention block in fp16 mixed-precision training (Table 3.13).

    The thesis's formula (§3.10): weights and gradients 2+4 bytes per parameter (fp16 copy + fp32
    master), Adam states 4+4, activations batch x length x hidden x 2 bytes.
    """
    memory = {
        "weights": weights * (2 + 4),
        "gradients": weights * (2 + 4),
        "adam_states": weights * (4 + 4),
        "activations": batch_size * seq_len * d_model * 2,
    }
    memory["total"] = sum(memory.values())
    return memory
