"""One training engine for pretraining and fine-tuning (DESIGN.md §7; thesis Tables 3.11, 3.12).

A run is ``Trainer(model, TrainConfig(...), batch_at, run_dir).fit()``. The engine owns the loop and
nothing about the data: ``batch_at(step, micro)`` returns the micro-batch for optimizer step ``step``
(0-based) and micro-batch index ``micro``. Random access by step is what makes resume exact: after a kill
the new job reloads the checkpoint and asks for the very batches the old job would have seen next.

Per optimizer step: set the learning rate from the schedule, run ``grad_accum`` forward/backward passes
(each loss divided by ``grad_accum``, so the gradient is the mean over the micro-batches), check the loss
is finite (before the update, so a NaN never reaches the weights), clip the gradient norm, step AdamW.
Every ``log_every`` steps a ``{step, loss, lr}`` record joins the history (``step`` counts completed
steps, ``loss`` is the mean over the steps since the previous record); every ``eval_every`` steps and at
the end ``evaluate(model)`` runs, with early stopping on ``primary_metric``; every ``checkpoint_every``
steps and at the end an atomic checkpoint is written to ``run_dir/checkpoint/``.

Data parallelism (torchrun): ``grad_accum`` is the number of micro-batches in one optimizer step over
all ranks (the profile's batch is the global batch, DESIGN §8). With ``world_size`` W > 1 the model is
wrapped in DistributedDataParallel and rank r computes micro-batches ``batch_at(step, micro * W + r)``
for ``micro`` in ``0 .. grad_accum / W - 1`` (W must divide ``grad_accum``), so one step consumes
micro-batch indices ``0 .. grad_accum - 1`` on any number of ranks. Each rank divides its losses by its
own ``grad_accum / W`` and DDP averages over the W ranks: the gradient is the mean over all
``grad_accum`` micro-batches, as in one process. Only rank 0 evaluates, writes checkpoints and shows
progress.
All ranks read the checkpoint, so ``run_dir`` must be on a file system they share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from leanlm.progress import progress

from leanlm.errors import ConfigError, TrainingError
from leanlm.io import write_error
from leanlm.modeling.models import loss_only_kwargs
from leanlm.modeling.recompute import set_activation_checkpointing
from leanlm.training import checkpointing, compiling, loss_readback
from leanlm.training.distributed import (
    all_reduce_sum,
    barrier,
    broadcast_object,
    gather_objects,
    init_distributed,
)
from leanlm.training.prefetch import BatchPrefetcher, count_tokens
from leanlm.training.schedules import schedule_fn
from leanlm.training.train_config import _RUN_DEFINING, TrainConfig
from leanlm.training.seeding import capture_rng_state, restore_rng_state, seed_everything

log = logging.getLogger(__name__)

def adamw_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed matrices and undecayed 1-D parameters.

    No weight decay on biases, LayerNorm/RMSNorm weights or any other parameter with fewer than two
    dimensions (scales, gates): decaying them pulls normalisation gains towards 0, which only hurts.
    Weight matrices and embeddings are decayed, as in BERT and the HF Trainer the thesis used.
    Frozen parameters (``requires_grad=False``) are left out.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


class Trainer:
    """Train ``model`` for ``config.total_steps`` optimizer steps; see the module docstring.

    ``evaluate(model)`` gets the unwrapped model in eval mode under ``torch.no_grad`` and the training
    autocast, on rank 0 only, and returns a dict of metrics (find the device with
    ``next(model.parameters()).device``). With ``primary_metric`` the best evaluation's weights are kept
    in memory and restored at the end; ``early_stopping_patience`` stops after that many evaluations in
    a row without improvement. A checkpoint in ``run_dir/checkpoint`` is loaded at construction.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        batch_at: Callable[[int, int], dict],
        run_dir: Path | None,
        evaluate: Callable[[nn.Module], dict] | None = None,
        primary_metric: str | None = None,
        higher_is_better: bool = True,
        on_step_start: Callable[[int], None] | None = None,
    ):
        if primary_metric is not None and evaluate is None:
            raise ConfigError(f"primary_metric={primary_metric!r} needs an evaluate function")
        if config.early_stopping_patience is not None and primary_metric is None:
            raise ConfigError(
                f"early_stopping_patience={config.early_stopping_patience} needs evaluate and "
                "primary_metric (the metric whose improvement resets the patience)"
            )
        self.config, self.batch_at, self.evaluate = config, batch_at, evaluate
        self.primary_metric, self.higher_is_better = primary_metric, higher_is_better
        self.on_step_start = on_step_start
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.rank, self.world_size, _, self.device = init_distributed()
        self.local_accum = local_grad_accum(config.grad_accum, self.world_size, config.desc)
        self.model = model.to(self.device)
        if config.activation_checkpointing:
            set_activation_checkpointing(self.model)  # ConfigError for a model without transformer blocks
        self.autocast_dtype = _autocast_dtype(config.precision, self.device)
        if self.device.type == "cuda":
            log.info("%s: %s", config.desc, compiling.set_matmul_precision(self.device, config.precision))
        # The training step reads the loss alone: a model that can skip its logits (the LM heads,
        # leanlm.modeling.lm_loss) computes the loss in chunks and never holds the whole logits.
        self.loss_only = loss_only_kwargs(model)
        # On an accelerator the loss is read back only at the log/eval/checkpoint boundaries, not every
        # step (a read waits for the device); the fused AdamW skips an update on the device instead.
        self.deferred_checks = loss_readback.defers_checks(self.device)
        self.optimizer = torch.optim.AdamW(
            adamw_param_groups(self.model, config.weight_decay), lr=config.lr,
            betas=config.adam_betas, eps=config.adam_eps, fused=self.deferred_checks,
        )
        self.multiplier = schedule_fn(
            config.schedule, config.total_steps, config.warmup_steps, config.num_cycles
        )
        # Built in fit (DDP and compile need a batch to probe): DDP and compile (TrainConfig.compile) wrap
        # the module that trains, not self.model, whose parameters, state_dict and evaluation stay those
        # of the plain module.
        self.train_model: nn.Module | None = None
        self.compiled, self.compile_fallback = False, None
        self.readback = loss_readback.LossReadback(
            self.optimizer, self.deferred_checks, self.run_dir, config.lr
        )
        self.state = checkpointing.TrainingState.fresh(config.total_steps)
        self.resumed_from: int | None = None
        self._rng_to_restore: dict | None = None
        self._saved_step: int | None = None
        if self.run_dir is not None:
            saved = checkpointing.load_checkpoint(self.run_dir)
            if saved is not None:
                self._resume(saved)

    # ----------------------------------------------------------------------------------- the loop
    def fit(self) -> dict:
        """Train to ``total_steps`` (or an early stop) and return the run summary."""
        cfg, st = self.config, self.state
        if self._rng_to_restore is not None:
            restore_rng_state(self._rng_to_restore)
            self._rng_to_restore = None
        elif st.step == 0:
            seed_everything(cfg.seed + self.rank)  # per-rank streams: ranks draw different dropout
        self.optimizer.zero_grad(set_to_none=True)
        if self.train_model is None and st.step < cfg.total_steps and not st.stopped:
            self.train_model = self._training_module()  # not for a finished run: no batch to probe
        self.model.train()
        self._session_tokens, self._session_seconds = 0, 0.0
        self._bar = progress(
            total=cfg.total_steps, initial=st.step, desc=cfg.desc, unit="step", dynamic_ncols=True,
            disable=not (cfg.progress and self.rank == 0),
        )
        batches = self._batches()
        try:
            while st.step < cfg.total_steps and not st.stopped:
                if self.on_step_start is not None:
                    self.on_step_start(st.step)
                started = time.perf_counter()
                lr = self._train_step(batches)
                elapsed = time.perf_counter() - started
                st.train_seconds += elapsed
                self._session_seconds += elapsed
                self._bar.update(1)
                self._after_step(lr)
            self._read_pending()
        finally:
            if isinstance(batches, BatchPrefetcher):
                batches.close()
            self._bar.close()
        if self.evaluate is not None and not st.stopped and st.last_eval_step != st.step:
            self._evaluate()
        if self.run_dir is not None and cfg.checkpoint_every and self._saved_step != st.step:
            self._save()
        if st.best_state is not None:
            self.model.load_state_dict(st.best_state)
        return self.summary()

    def _keys(self):
        """The (step, micro-batch index) of every batch this rank will ask for, in order."""
        for step in range(self.state.step, self.config.total_steps):
            for micro in range(self.local_accum):
                yield step, micro * self.world_size + self.rank

    def _batches(self):
        """Where the loop takes its batches from: a :class:`BatchPrefetcher` building ``config.prefetch``
        micro-batches ahead (pinned on CUDA), or, with ``prefetch: 0``, ``batch_at`` called inline."""
        if self.config.prefetch == 0 or self.state.step >= self.config.total_steps:
            return None
        return BatchPrefetcher(self.batch_at, self._keys(), self.config.prefetch,
                               pin_memory=self.device.type == "cuda")

    def _train_step(self, batches: BatchPrefetcher | None) -> float:
        """One optimizer step; returns its learning rate. Its loss and token count stay on the device
        until :meth:`_read_pending` (at once on CPU, where reading waits for nothing)."""
        cfg, st, step = self.config, self.state, self.state.step
        lr = cfg.lr * self.multiplier(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), dtype=torch.float32, device=self.device)
        tokens = 0
        for micro in range(self.local_accum):
            index = micro * self.world_size + self.rank
            if batches is None:
                batch = self.batch_at(step, index)
                micro_tokens = count_tokens(batch)
            else:
                batch, micro_tokens = batches.get(step, index)
            tokens += micro_tokens
            batch = self._to_device(batch)
            # Gradients are all-reduced on the last micro-batch only (DDP's no_sync for the others).
            last = micro == self.local_accum - 1
            sync = contextlib.nullcontext() if last or self.world_size == 1 else self.train_model.no_sync()
            with sync:
                with self._autocast():
                    output = self.train_model(**batch, **self.loss_only)
                loss = _loss_of(output)
                # DDP averages over ranks, so the gradient is the mean over all grad_accum micro-batches.
                (loss / self.local_accum).backward()
            loss_sum += loss.detach().float()
        # The token count is a host number: filled in on the device, no copy to wait for.
        stats = torch.stack([loss_sum.double() / self.local_accum,
                             torch.full((), float(tokens), dtype=torch.float64, device=self.device)])
        self.readback.add(step, lr, all_reduce_sum(stats))
        if not self.deferred_checks:
            self._read_pending()  # raises before the update if the loss is not finite
        if cfg.clip_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        st.step += 1
        return lr

    def _read_pending(self) -> None:
        """Read the losses and token counts of the steps not yet read (one device sync,
        :class:`~leanlm.training.loss_readback.LossReadback`), record them and raise TrainingError at the
        first non-finite loss, naming its step."""
        if not self.readback.pending:
            return
        st = self.state
        for step, lr, loss_value, step_tokens in self.readback.read(self.world_size):
            st.losses[step] = loss_value
            st.tokens += round(step_tokens)
            self._session_tokens += round(step_tokens)
        rate = self._session_tokens / self._session_seconds if self._session_seconds > 0 else 0.0
        self._bar.set_postfix(loss=f"{loss_value:.4f}", lr=f"{lr:.2e}", tok_s=f"{rate:,.0f}", refresh=False)

    def _after_step(self, lr: float) -> None:
        cfg, st, done = self.config, self.state, self.state.step
        log_due = done % cfg.log_every == 0 or done == cfg.total_steps
        eval_due = self.evaluate is not None and cfg.eval_every and done % cfg.eval_every == 0
        save_due = (self.run_dir is not None and cfg.checkpoint_every and done % cfg.checkpoint_every == 0
                    and done < cfg.total_steps and not st.stopped)
        if log_due or eval_due or save_due:
            self._read_pending()  # the only device syncs of the loop: at these boundaries
        if log_due:
            window = st.losses[st.last_log_step:done]
            st.history.append({"step": done, "loss": float(window.mean()), "lr": lr})
            st.last_log_step = done
        if eval_due:
            self._evaluate()
        if save_due and not st.stopped:
            self._save()

    # ------------------------------------------------------------------ evaluation, early stopping
    def _evaluate(self) -> None:
        st, metrics = self.state, None
        if self.rank == 0:
            self.model.eval()
            with torch.no_grad(), self._autocast():
                metrics = self.evaluate(self.model)
            self.model.train()
            if not isinstance(metrics, Mapping):
                raise TrainingError(f"evaluate() must return a dict of metrics, got {type(metrics).__name__}")
            metrics = {str(k): _plain(v) for k, v in metrics.items()}
        metrics = broadcast_object(metrics)
        st.history.append({"step": st.step, "eval": metrics})
        st.last_eval_step = st.step
        if self.primary_metric is None:
            return
        if self.primary_metric not in metrics:
            raise TrainingError(
                f"primary_metric {self.primary_metric!r} is not among the metrics evaluate() returned "
                f"({', '.join(sorted(metrics))}); fix the metric name in the params/stage runner"
            )
        value = float(metrics[self.primary_metric])
        better = st.best_metric is None or (
            value > st.best_metric if self.higher_is_better else value < st.best_metric
        )
        if math.isfinite(value) and better:
            st.best_metric, st.best_step, st.bad_evals = value, st.step, 0
            st.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        else:
            st.bad_evals += 1
            patience = self.config.early_stopping_patience
            st.stopped = patience is not None and st.bad_evals >= patience

    # ---------------------------------------------------------------------------- checkpoints
    def _save(self) -> None:
        rng = gather_objects(capture_rng_state())  # every rank's streams, for an exact resume
        if self.rank == 0:
            state = {
                **self.state.to_dict(), "rng": rng, "world_size": self.world_size,
                "config": _run_defining(dataclasses.asdict(self.config)),
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            }
            where = checkpointing.checkpoint_dir(self.run_dir)
            try:
                checkpointing.save_checkpoint(self.run_dir, state)
            except OSError as exc:  # full or read-only disk, permissions: say which and where
                raise TrainingError(f"could not write the checkpoint of step {self.state.step}: "
                                    f"{write_error(where, exc)}") from exc
            except Exception as exc:  # torch.save reports a failed write as RuntimeError, without errno
                raise TrainingError(
                    f"could not write the checkpoint of step {self.state.step} into {where}: "
                    f"{_why_unwritten(self.run_dir, state)} ({type(exc).__name__}: {exc})"
                ) from exc
        barrier()
        self._saved_step = self.state.step

    def _resume(self, state: dict) -> None:
        path = checkpointing.checkpoint_dir(self.run_dir) / checkpointing.STATE_FILE
        try:
            saved, now = state["config"], _run_defining(dataclasses.asdict(self.config))
            changed = {k: (saved.get(k), v) for k, v in now.items() if saved.get(k) != v}
            if state["world_size"] != self.world_size:
                changed["world_size"] = (state["world_size"], self.world_size)
            if changed:
                diff = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
                raise TrainingError(
                    f"checkpoint {path} belongs to a run with other settings ({diff}); delete "
                    f"{path.parent} to start over with the new settings, or restore the old ones"
                )
            try:
                self.model.load_state_dict(state["model"])
                self.optimizer.load_state_dict(state["optimizer"])
            except (RuntimeError, ValueError) as exc:
                raise checkpointing.corrupt(path, f"it does not fit this model/optimizer ({exc})") from exc
            self.state = checkpointing.TrainingState.from_dict(state)
            self._rng_to_restore = state["rng"][self.rank]
        except KeyError as exc:
            raise checkpointing.corrupt(path, f"the entry {exc} is missing") from None
        self.resumed_from = self._saved_step = self.state.step

    def remove_checkpoint(self) -> None:
        """Delete ``run_dir/checkpoint`` (the stage runner calls it once the final model is saved)."""
        if self.run_dir is not None and self.rank == 0:
            checkpointing.remove_checkpoint(self.run_dir)
        barrier()

    # -------------------------------------------------------------------------------- helpers
    def _training_module(self) -> nn.Module:
        """The module the loop trains: the model, wrapped in DDP on several processes, then compiled
        when the run's ``compile`` setting asks for it on this device (eager if compiling fails)."""
        module = self._wrap_ddp() if self.world_size > 1 else self.model
        if not compiling.compile_wanted(self.config.compile, self.device):
            return module
        module, self.compile_fallback = compiling.compiled_or_eager(module, self._probe, self.config.desc)
        self.compiled = self.compile_fallback is None
        return module

    def _probe(self, module: nn.Module, after_backward: Callable[[], None] | None = None) -> None:
        """One forward/backward of ``module`` on this step's first micro-batch, leaving no trace: the RNG
        streams are forked and the gradients discarded (``after_backward`` may read them first)."""
        devices = [self.device.index] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                batch = self._to_device(self.batch_at(self.state.step, self.rank))
                with self._autocast():
                    loss = _loss_of(module(**batch, **self.loss_only))
                loss.backward()
            if after_backward is not None:
                after_backward()
        finally:
            self.optimizer.zero_grad(set_to_none=True)

    def _wrap_ddp(self) -> DistributedDataParallel:
        """Wrap the model in DDP, with ``find_unused_parameters`` only if the model needs it.

        Some objectives leave parameters without a gradient (a pooler under MLM), which plain DDP
        rejects; the flag that allows it costs a graph traversal every step, so one probe
        forward/backward (:meth:`_probe`) decides. Gradients are views into DDP's all-reduce buckets
        (``gradient_as_bucket_view``): no copy between the two after each backward, and one
        gradient-sized buffer less in memory.
        """
        unused = []
        self._probe(self.model, lambda: unused.append(
            sum(p.grad is None for p in self.model.parameters() if p.requires_grad)))
        any_unused = all_reduce_sum(torch.tensor([float(unused[0])], device=self.device)).item() > 0
        devices = [self.device.index] if self.device.type == "cuda" else []
        return DistributedDataParallel(
            self.model, device_ids=devices or None, find_unused_parameters=any_unused,
            gradient_as_bucket_view=True,
        )

    def _to_device(self, batch: Mapping[str, Any]) -> dict:
        return {k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}

    def summary(self) -> dict:
        """The run summary ``fit`` returns (steps counts completed optimizer steps)."""
        st, n = self.state, self.state.step
        tail = max(1, math.ceil(0.1 * n))
        return {
            "steps": n,
            "final_loss": float(st.losses[n - 1]) if n else None,
            "mean_loss_last_10pct": float(st.losses[n - tail:n].mean()) if n else None,
            "tokens": st.tokens,
            "train_seconds": st.train_seconds,
            "tokens_per_s": st.tokens / st.train_seconds if st.train_seconds > 0 else 0.0,
            "best_metric": st.best_metric,
            "best_step": st.best_step,
            "history": list(st.history),
            "resumed_from": self.resumed_from,
            # Whether the module that trained was compiled (TrainConfig.compile), and if compiling failed, why.
            "compiled": self.compiled,
            "compile_fallback": self.compile_fallback,
        }

    def _autocast(self):
        return _autocast(self.autocast_dtype, self.device)


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


def training_autocast(precision: str, device: torch.device):
    """The context a run with ``precision`` computes its forward passes in on ``device``, as the
    Trainer does: bf16 autocast, or no autocast for fp32 (tests train a step exactly this way)."""
    return _autocast(_autocast_dtype(precision, device), device)


def _autocast(dtype: torch.dtype | None, device: torch.device):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            f"precision={precision!r} needs bf16, which {torch.cuda.get_device_name(device)} lacks; "
            "set precision: fp32"
        )
    return torch.bfloat16


def _loss_of(output: Any) -> torch.Tensor:
    loss = output.get("loss") if isinstance(output, Mapping) else None
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        got = type(output).__name__ if loss is None else f"loss of shape {tuple(getattr(loss, 'shape', ()))}"
        raise TrainingError(
            f"model(**batch) must return a dict whose 'loss' is a scalar tensor (the mean over the "
            f"micro-batch); got {got}"
        )
    return loss


def _why_unwritten(run_dir: Path, state: dict) -> str:
    """Why a checkpoint write without an errno (torch.save's RuntimeError) failed, as far as can be told:
    too little free space for the state's tensors, or no write permission."""
    need = _tensor_bytes(state)
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        free = None
    if free is not None and free < need:
        return (f"the disk is full ({free:,} bytes free, the checkpoint needs about {need:,}); free space "
                f"there or point the run elsewhere, then re-run")
    if not os.access(run_dir, os.W_OK):
        return f"no permission to write into {run_dir}; fix its permissions, then re-run"
    return "check free disk space and permissions there"


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _run_defining(config: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items() if k in _RUN_DEFINING}


def _plain(value: Any) -> Any:
    """Metric values as plain Python (numpy/torch scalars -> float), so checkpoints load weights-only."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy/torch scalars and arrays
        return value.tolist()
    return value
