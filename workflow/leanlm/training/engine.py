"""One training engine for pretraining and fine-tuning (DESIGN.md §7; thesis Tables 3.11, 3.12).

A run is ``Trainer(model, TrainConfig(...), batch_at, run_dir).fit()``. The engine owns the loop and
nothing about the data: ``batch_at(step, micro)`` returns the micro-batch for optimizer step ``step``
(0-based) and micro-batch index ``micro``. Random access by step is what makes resume exact: after a kill
the new job reloads the checkpoint and asks for the very batches the old job would have seen next. A
``batch_at`` whose batches change shape also says which dimensions vary (``batch_at.varying_dims(batch)``,
input name -> dimensions), which a compiled run compiles as symbols: once, not once more per new size
(:mod:`leanlm.training.compiling`).

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
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn
from leanlm.progress import progress

from leanlm.errors import ConfigError, TrainingError
from leanlm.modeling.models import loss_only_kwargs
from leanlm.modeling.recompute import set_activation_checkpointing
from leanlm.training import checkpointing, compiling, loss_readback
from leanlm.training.distributed import (
    all_reduce_sum,
    barrier,
    broadcast_object,
    ddp_wrapped,
    gather_objects,
    init_distributed,
    local_grad_accum,
)
from leanlm.training.optimizer import adamw
from leanlm.training.precision import autocast_dtype, autocast_to
from leanlm.training.prefetch import BatchPrefetcher, count_tokens
from leanlm.training.schedules import schedule_fn
from leanlm.training.train_config import TrainConfig
from leanlm.training.seeding import capture_rng_state, restore_rng_state, seed_everything

log = logging.getLogger(__name__)

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
        self.autocast_dtype = autocast_dtype(config.precision, self.device)
        if self.device.type == "cuda":
            log.info("%s: %s", config.desc, compiling.set_matmul_precision(self.device, config.precision))
        # The training step reads the loss alone: a model that can skip its logits (the LM heads,
        # leanlm.modeling.lm_loss) computes the loss in chunks and never holds the whole logits.
        self.loss_only = loss_only_kwargs(model)
        # On an accelerator the loss is read back only at the log/eval/checkpoint boundaries, not every
        # step (a read waits for the device); the fused AdamW skips an update on the device instead.
        self.deferred_checks = loss_readback.defers_checks(self.device)
        self.optimizer = adamw(self.model, config, fused=self.deferred_checks)
        self.multiplier = schedule_fn(
            config.schedule, config.total_steps, config.warmup_steps, config.num_cycles
        )
        # Built in fit (DDP and compile need a batch to probe): DDP and compile (TrainConfig.compile) wrap
        # the module that trains, not self.model, whose parameters, state_dict and evaluation stay those
        # of the plain module.
        self.train_model: nn.Module | None = None
        self.compiled, self.compile_fallback, self._graphs_before = False, None, 0
        # The batch builder's ``varying_dims(batch)``, where it has one: the dimensions to compile as
        # symbols (leanlm.training.compiling.mark_varying), marked only when the run compiles.
        self._varying_dims = getattr(batch_at, "varying_dims", None)
        self._mark_varying = False
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
            batch = self._compiled_input(self._to_device(batch))
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
                "config": checkpointing.run_defining(dataclasses.asdict(self.config)),
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            }
            checkpointing.save_or_explain(self.run_dir, state, self.state.step)
        barrier()
        self._saved_step = self.state.step

    def _resume(self, state: dict) -> None:
        self.state, rng = checkpointing.restore(state, self.run_dir, dataclasses.asdict(self.config),
                                                self.world_size, self.model, self.optimizer)
        self._rng_to_restore = rng[self.rank]
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
        module = ddp_wrapped(self.model, self.device, self._probe) if self.world_size > 1 else self.model
        if not compiling.compile_wanted(self.config.compile, self.device, self.config.total_steps):
            if self.config.compile == "auto" and self.device.type == "cuda":
                log.info("%s: %d steps train eagerly (compile: auto compiles runs of %d steps or more, which "
                         "repay the compile; compile: true compiles any run)", self.config.desc,
                         self.config.total_steps, compiling.AUTO_MIN_STEPS)
            return module
        self._mark_varying = self._varying_dims is not None
        self._graphs_before = compiling.graphs_compiled()
        module, self.compile_fallback = compiling.compiled_or_eager(module, self._probe, self.config.desc)
        self.compiled = self.compile_fallback is None
        return module

    def _probe(self, module: nn.Module, after_backward: Callable[[], None] | None = None) -> None:
        """One forward/backward of ``module`` on this step's first micro-batch, leaving no trace: the RNG
        streams are forked and the gradients discarded (``after_backward`` may read them first)."""
        devices = [self.device.index] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                batch = self._compiled_input(self._to_device(self.batch_at(self.state.step, self.rank)))
                with self._autocast():
                    loss = _loss_of(module(**batch, **self.loss_only))
                loss.backward()
            if after_backward is not None:
                after_backward()
        finally:
            self.optimizer.zero_grad(set_to_none=True)

    def _compiled_input(self, batch: dict) -> dict:
        """``batch``, its varying dimensions marked dynamic when the run compiles (one graph for the
        run, not one more per new size: leanlm.training.compiling's docstring says why)."""
        if self._mark_varying:
            compiling.mark_varying(batch, self._varying_dims(batch), type(self.batch_at).__name__)
        return batch

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
            # Graphs dynamo compiled for this run, probe included: 1 unless a shape the batch builder does not
            # declare varying changed (0: the graphs of an earlier run in the process served it).
            "compiled_graphs": compiling.graphs_compiled() - self._graphs_before if self.compiled else None,
        }

    def _autocast(self):
        return autocast_to(self.autocast_dtype, self.device)


def _loss_of(output: Any) -> torch.Tensor:
    loss = output.get("loss") if isinstance(output, Mapping) else None
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        got = type(output).__name__ if loss is None else f"loss of shape {tuple(getattr(loss, 'shape', ()))}"
        raise TrainingError(
            f"model(**batch) must return a dict whose 'loss' is a scalar tensor (the mean over the "
            f"micro-batch); got {got}"
        )
    return loss


def _plain(value: Any) -> Any:
    """Metric values as plain Python (numpy/torch scalars -> float), so checkpoints load weights-only."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy/torch scalars and arrays
        return value.tolist()
    return value
