"""Micro-batches built ahead of the training step, in a background thread.

The engine asks for ``batch_at(step, micro)`` in a fixed order (steps in turn, each rank's micro-batch
indices within a step), so the batches a run will need are known in advance. :class:`BatchPrefetcher`
builds up to ``depth`` of them ahead while the accelerator runs the current step: a paper MLM batch
(128 x 512) costs 48-62 ms of CPU (gathering rows from the memory-mapped stream, masking), which an
inline build adds to every step. Each batch's token count is taken on the CPU copy (no device sync), and
on CUDA its tensors are copied into pinned memory so the engine's ``non_blocking`` copy is asynchronous.

Why a thread and not a process (a DataLoader worker): ``batch_at`` holds memory-mapped token streams,
codebooks and tokenizers that would have to be pickled or reopened per worker, while the expensive parts
of building a batch (indexing, ``torch.isin``, the random draws, ``torch.where``) run in torch kernels
that release the GIL. Determinism is unchanged because every ``batch_at`` in the project draws only from
its own ``step_generator(seed, step, micro)`` and per-epoch seeded permutations, never from the global
random streams the model's dropout uses (``tests/test_prefetch.py`` checks losses bit for bit with the
prefetcher on and off). An exception raised while building a batch (a bad row, a kill injected by a test)
is raised in the training thread when that batch is asked for, not earlier: the steps before it run as
they would without prefetching.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch

_DONE = object()  # the end of the key sequence


def count_tokens(batch: Mapping[str, Any]) -> int:
    """Tokens in a micro-batch: non-pad entries of ``attention_mask``, else ``input_ids.numel()``.

    Batches with neither (non-text models) count their examples (first dimension of the first tensor).
    Called on the CPU batch, so reading the count never waits for an accelerator.
    """
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return int(torch.count_nonzero(mask))
    ids = batch.get("input_ids")
    if isinstance(ids, torch.Tensor):
        return ids.numel()
    first = next((v for v in batch.values() if isinstance(v, torch.Tensor) and v.ndim), None)
    return int(first.shape[0]) if first is not None else 0


def pinned(batch: Mapping[str, Any]) -> dict:
    """``batch`` with its CPU tensors in page-locked memory (an asynchronous host-to-device copy needs it)."""
    return {k: v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
            for k, v in batch.items()}


class BatchPrefetcher:
    """Builds ``batch_at(*key)`` for each key of ``keys`` in order, ``depth`` ahead, in a daemon thread.

    :meth:`get` returns ``(batch, tokens)`` for the next key and checks that it is the key asked for
    (the engine and the prefetcher must agree on the order). :meth:`close` stops the thread; batches
    built but not taken (an early stop) are dropped.
    """

    def __init__(self, batch_at: Callable[[int, int], dict], keys: Iterable[tuple[int, int]], depth: int,
                 pin_memory: bool = False):
        if depth < 1:
            raise ValueError(f"prefetch depth {depth} must be >= 1 (0 means: build inline, no prefetcher)")
        self.batch_at, self.pin_memory = batch_at, pin_memory
        self._keys: Iterator[tuple[int, int]] = iter(keys)
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="leanlm-batch-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        for key in self._keys:
            if self._stop.is_set():
                return
            try:
                batch = self.batch_at(*key)
                tokens = count_tokens(batch)
                if self.pin_memory:
                    batch = pinned(batch)
                item = (key, batch, tokens, None)
            except BaseException as exc:  # handed to the training thread, raised there when due
                self._put((key, None, 0, exc))
                return
            if not self._put(item):
                return
        self._put(_DONE)

    def get(self, step: int, micro: int) -> tuple[dict, int]:
        """The batch of ``(step, micro)`` and its token count; raises what building it raised."""
        item = self._queue.get()
        if item is _DONE:
            raise RuntimeError(f"the prefetcher has no batch left for step {step}, micro-batch {micro}")
        key, batch, tokens, error = item
        if error is not None:
            raise error
        if key != (step, micro):
            raise RuntimeError(f"the prefetcher built batch {key} where ({step}, {micro}) was asked for")
        return batch, tokens

    def close(self) -> None:
        self._stop.set()
        try:  # free a worker blocked on a full queue
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        self._thread.join(timeout=5.0)

    def __enter__(self) -> BatchPrefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
