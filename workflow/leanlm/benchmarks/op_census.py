"""What one training step of a module launches, device-independently: an operator census.

A GPU step's time is set by its kernels (how many, how many bytes each moves, how many FLOPs), and
all three are properties of the program, not of the device: they can be counted on a CPU at a reduced
size and scaled. :func:`census` runs ``step()`` (a forward and backward) under a dispatch mode that
records every ATen operator the autograd engine and the module issue: its name, the bytes of the
tensors it writes (its outputs) and reads (its tensor inputs), and the dtypes it writes; FLOPs come
from ``torch.utils.flop_counter`` (GEMMs, convolutions and attention; elementwise ops count 0).

Views (``view``, ``transpose``, ``expand``, ...) and bare allocations (``empty``, ``new_empty``) write
nothing and are left out, as a GPU launches no kernel for them. Bytes read count each input tensor's logical size once per operator (a broadcast
operand counts its own size, not the broadcast one); that is what a kernel must move at the least.

Used for docs/benchmarks.md's analysis of the ch. 4 mixers' and MHE's GPU step times (issue: the
first GPU check's D6-D8); ``python -m leanlm.benchmarks.op_census`` prints the comparison tables.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

# Allocations: memory handed out, nothing written (no kernel).
_ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


def _is_view(func) -> bool:
    """Whether ``func`` writes nothing: returns an alias of an input (a view) or only allocates."""
    if func.overloadpacket.__name__ in _ALLOCATIONS:
        return True
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


@dataclass
class Census:
    """Totals of one step: kernels (operators that write memory), bytes written and read, FLOPs."""

    kernels: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    flops: int = 0
    by_op: Counter = field(default_factory=Counter)           # op name -> launches
    written_by_op: Counter = field(default_factory=Counter)   # op name -> bytes written
    written_by_dtype: Counter = field(default_factory=Counter)  # dtype -> bytes written
    largest_write: int = 0

    def row(self) -> dict:
        return {"kernels": self.kernels, "GB_written": self.bytes_written / 1e9,
                "GB_read": self.bytes_read / 1e9, "GFLOP": self.flops / 1e9,
                "largest_write_MB": self.largest_write / 1e6}


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Recorder(TorchDispatchMode):
    def __init__(self, census: Census):
        super().__init__()
        self.census = census

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _is_view(func):
            return out
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        written = sum(_bytes(t) for t in outs)
        if not written:
            return out
        c = self.census
        name = str(func.overloadpacket.__name__)
        c.kernels += 1
        c.bytes_written += written
        c.bytes_read += sum(_bytes(t) for t in ins)
        c.by_op[name] += 1
        c.written_by_op[name] += written
        c.largest_write = max(c.largest_write, written)
        for t in outs:
            c.written_by_dtype[str(t.dtype).replace("torch.", "")] += _bytes(t)
        return out


def census(step: Callable[[], object]) -> Census:
    """Run ``step`` once (forward and backward) and count what it launched (module docstring)."""
    result = Census()
    with FlopCounterMode(display=False) as flops, _Recorder(result):
        step()
    result.flops = flops.get_total_flops()
    return result


def format_census(name: str, c: Census, top: int = 8) -> str:
    """A few lines: totals, then the operators that wrote the most bytes."""
    r = c.row()
    lines = [f"{name}: {r['kernels']} kernels, {r['GB_written']:.3f} GB written, {r['GB_read']:.3f} GB read, "
             f"{r['GFLOP']:.2f} GFLOP; largest single write {r['largest_write_MB']:.1f} MB; written by dtype: "
             + ", ".join(f"{k} {v / 1e9:.3f} GB" for k, v in c.written_by_dtype.most_common())]
    for op, b in c.written_by_op.most_common(top):
        lines.append(f"    {op:<40}{c.by_op[op]:>6} x  {b / 1e9:8.3f} GB")
    return "\n".join(lines)


def decoder_step(attention: str, length: int, batch: int, layers: int = 2, size: str = "500M"):
    """One bf16-autocast training step of a ch. 4 decoder of Table 4.10's ``size`` (its widths and
    heads; ``layers`` blocks, a 256-token vocabulary so the head does not dominate), as a callable."""
    from leanlm.modeling.models import build_model
    from leanlm.modeling.qwen_sizes import qwen_config

    torch.manual_seed(0)
    config = qwen_config(size, attention=attention, n_layers=layers, vocab_size=256, max_position=length)
    model = build_model(config, "causal_lm").train()
    ids = torch.randint(0, 256, (batch, length))
    if model.model.qk_stream == "text":
        model.set_fixed_sequence(torch.randint(0, 256, (length,)))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(ids, labels=ids)["loss"]
        loss.backward()
    return step


def main(argv: list[str] | None = None) -> dict[str, Census]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", nargs="+", default=["standard", "static_emb_qk", "rnd_emb_qk", "approximate"])
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args(argv)
    found = {}
    for name in args.mixers:
        step = decoder_step(name, args.length, args.batch, args.layers)
        step()  # first step: lazy allocations and caches, not counted
        found[name] = census(step)
        print(format_census(f"{name} (500M widths, {args.layers} layers, {args.batch} x {args.length})", found[name]))
    return found


if __name__ == "__main__":
    main()
