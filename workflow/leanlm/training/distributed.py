"""Multi-GPU data parallelism through ``torchrun`` (DDP), and a no-op single-process path.

``torchrun --nproc_per_node=N leanlm pretrain ...`` starts N processes and tells each its place in the
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). ``init_distributed`` reads those
and joins the process group (NCCL on GPUs, gloo on CPU); without them it is one process and no group.
The helpers below collapse to plain values when there is no group, so the engine has one code path.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from leanlm.errors import ConfigError


def init_distributed() -> tuple[int, int, int, torch.device]:
    """Return ``(rank, world_size, local_rank, device)``; join the process group when WORLD_SIZE > 1.

    Safe to call more than once (a group that is already up is reused). The device is
    ``cuda:<local_rank>`` when CUDA is available, else the CPU.
    """
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise ConfigError(
            "RANK / WORLD_SIZE / LOCAL_RANK in the environment must be integers (got "
            f"RANK={os.environ.get('RANK')!r}, WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}, "
            f"LOCAL_RANK={os.environ.get('LOCAL_RANK')!r}); launch with torchrun or unset them"
        ) from None
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if not dist.is_backend_available(backend):
            raise ConfigError(
                f"WORLD_SIZE={world_size} asks for distributed training, but torch has no {backend} "
                "backend here; run with one process (unset WORLD_SIZE) or install a torch build with it"
            )
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return rank, world_size, local_rank, device


def cleanup_distributed() -> None:
    """Leave the process group, if any (call once at the end of a torchrun job)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place (identity in one process)."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (identity in one process)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: Any) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (``[obj]`` in one process)."""
    if not is_distributed():
        return [obj]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def rank() -> int:
    """This process's rank (0 in one process)."""
    return dist.get_rank() if is_distributed() else 0


@contextlib.contextmanager
def rank_zero_first() -> Iterator[None]:
    """Rank 0 runs the block first, the other ranks after it: for work that fills a shared cache (the
    tokenised corpus), which rank 0 builds once and the others then only read."""
    if rank() != 0:
        barrier()
    yield
    if rank() == 0:
        barrier()


def local_grad_accum(grad_accum: int, world_size: int, desc: str = "train") -> int:
    """Micro-batches each of ``world_size`` ranks runs per optimizer step: ``grad_accum / world_size``.

    ``grad_accum`` counts the micro-batches of one step over all ranks, so the world size never changes
    the optimisation; a world size that does not divide it is refused rather than rounded.
    """
    if grad_accum % world_size:
        divisors = [w for w in range(1, grad_accum + 1) if grad_accum % w == 0]
        raise ConfigError(
            f"{desc}: grad_accum = {grad_accum} micro-batches per step cannot be shared by {world_size} "
            f"processes (WORLD_SIZE, torchrun's --nproc-per-node, resources.pretrain.gpus): it must be a "
            f"multiple of the process count. Keep the global batch batch_size x grad_accum and choose "
            f"grad_accum as a multiple of {world_size} (e.g. halve batch_size and double grad_accum), or run "
            f"on {' / '.join(map(str, divisors))} processes"
        )
    return grad_accum // world_size


def ddp_wrapped(model: torch.nn.Module, device: torch.device, probe) -> DistributedDataParallel:
    """``model`` wrapped in DDP, with ``find_unused_parameters`` only if the model needs it.

    Some objectives leave parameters without a gradient (a pooler under MLM), which plain DDP rejects;
    the flag that allows it costs a graph traversal every step, so one probe forward/backward decides
    (``probe(module, after_backward)``: the engine's, which leaves no trace). Gradients are views into
    DDP's all-reduce buckets (``gradient_as_bucket_view``): no copy between the two after each backward,
    and one gradient-sized buffer less in memory.
    """
    unused = []
    probe(model, lambda: unused.append(sum(p.grad is None for p in model.parameters() if p.requires_grad)))
    any_unused = all_reduce_sum(torch.tensor([float(unused[0])], device=device)).item() > 0
    devices = [device.index] if device.type == "cuda" else []
    return DistributedDataParallel(
        model, device_ids=devices or None, find_unused_parameters=any_unused,
        gradient_as_bucket_view=True,
    )
