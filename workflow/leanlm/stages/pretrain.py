"""``leanlm pretrain``: pretrain one model of the experiment matrix with its objective.

Objectives are registered by name in :data:`OBJECTIVES` (the ``objective`` of an experiment and the
``pretrain.<objective>`` block of a profile), one file per objective in :mod:`leanlm.objectives`:
``mlm`` (BERT), ``causal_lm`` (GPT-2, Qwen), ``shuffle_random`` (ch. 2), ``translation`` (ch. 3's
encoder-decoder, trained from scratch), ``hub`` and ``none`` (ch. 2's CANINE-C and ProFormer). An objective says which
model head it trains, how it turns the packed corpus into batches, and how it scores the validation split.

Reads the run's corpus and tokenizer (the profile's, or the named ones its experiment's ``pretrain_data``
picks and the profile defines: ch. 4's SlimPajama and Pythia BPE, :mod:`leanlm.data.pretrain_data`),
packs the training documents into full-length sequences ([CLS] ... [SEP] rows for BERT-style
tokenizers; ``EOS d1 EOS d2 ...`` for an end-of-text BPE, :mod:`leanlm.training.eos_packing`), trains
with the shared engine (checkpoints + resume after a kill), and writes

- ``models/<profile>/<run_id>/{model.safetensors,config.json}`` (loadable with one call; plus
  ``tokenizer.json`` for a run with a named tokenizer, which evaluation reads: training.run_tokenizer), and
- ``results/<profile>/runs/<run_id>/pretrain.json`` (config, summary, validation MLM loss,
  parameter counts, timing, hardware).

Both packings ([CLS]/[SEP] for chs. 2-3, end-of-text for ch. 4) read a memory-mapped token stream built
once per (tokenizer, split) (:mod:`leanlm.training.eos_packing`), so neither Wikipedia + BookCorpus nor
SlimPajama's ~16B tokens ever sit in memory; ch. 2's hash codebooks stream their rows the same way
(:mod:`leanlm.hashing.codebook_streams`).
How the run's text becomes its model's inputs (tokenizer, ch. 2's own packing and features, ch. 4's fixed
text) is its input route's, found by name (:func:`leanlm.plugins.input_route`); this module imports no route.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import math
import os
import time

from leanlm import paths
from leanlm.data.pretrain_data import embedding_rows, run_data
from leanlm.errors import ConfigError, LeanLMError, TrainingError
from leanlm.io import atomic_path, check_writable, json_text
from leanlm.modeling.checkpoint import save_checkpoint
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import (embedding_parameters, model_attention_parameters, total_parameters,
                                     word_embedding_parameters)
from leanlm.modeling.models import build_model
# The folder leanlm/objectives is the registry: objective <name> is class ``Objective`` of leanlm.objectives.<name>;
# likewise leanlm/routes for how the run's text becomes its model's inputs (input_route).
from leanlm.plugins import OBJECTIVES, input_route
from leanlm.provenance import hardware
from leanlm.runs import PRETRAIN_SEED, get_run, pretrain_settings, public
from leanlm.data.tokenizer import special_token_id
from leanlm.stages.packed_batches import PackedBatches, pack_rows, uses_eos_packing, validation_loss
from leanlm.training.checkpointing import run_lock
from leanlm.training.distributed import (barrier, broadcast_object, cleanup_distributed, init_distributed,
                                         local_grad_accum, rank_zero_first)
from leanlm.training.engine import TrainConfig, Trainer
from leanlm.training.run_tokenizer import save_run_tokenizer
from leanlm.training.seeding import seed_everything
from leanlm.training.step_timing import StepClock

log = logging.getLogger(__name__)

# PRETRAIN_SEED (leanlm.runs, re-exported here): the seed of every run but a further pretraining replica,
# which is pretrained with its own (Run.pretrain_seed: data order, initialisation and masking all follow it).


class PretrainObjective(abc.ABC):
    """How a run's model is made: ``run`` writes the model and its pretrain.json record.

    ``head``: the model head trained (leanlm.modeling.models); ``metric``: the name of the
    validation number written to pretrain.json. Objectives on packed text derive from
    :class:`PackedTextObjective`; the others (translation, hub checkpoints, ProFormer's none) write
    their own ``run``.
    """

    head: str = ""
    metric: str = "loss"
    data_parallel: bool = False  # whether run() can be one of several torchrun processes
    # Leave the final training checkpoint in the run folder once the outputs are written (the pipeline's
    # pretrain rule asks for it: the Snakefile deletes it once Snakemake has recorded the outputs, so a
    # job killed in between resumes at its last step instead of from step 0). By hand it is deleted.
    keep_checkpoint: bool = False

    @abc.abstractmethod
    def run(self, config: dict, run) -> dict:
        """Make run ``run``'s model and return its pretrain.json record."""

    def head_options(self, settings: dict) -> dict:
        """Keyword arguments of the ``head`` model that the pretraining block picks (none by default): what
        the job builds, and so what the budget and memory estimates build (leanlm.budget.head_options)."""
        return {}


class PackedTextObjective(PretrainObjective):
    """An objective over the packed pretraining corpus (MLM, causal LM, Shuffle+Random): the packing and
    the training loop are shared (:func:`pretrain_packed`); the objective supplies its batches."""

    data_parallel = True  # pretrain_packed shares the global batch over torchrun's processes

    @abc.abstractmethod
    def batches(self, settings: dict, tokenizer, sequences, seed: int) -> PackedBatches:
        """The engine's ``batch_at(step, micro)`` over the packed rows ``sequences``."""

    def run(self, config: dict, run) -> dict:
        return pretrain_packed(config, run, self)




def pretrain_train_config(settings: dict, desc: str, seed: int = PRETRAIN_SEED) -> TrainConfig:
    """The engine's settings from a run's pretraining block (pretrain.<objective> with its variant);
    ``seed``: the run's pretraining seed (Run.pretrain_seed)."""
    return TrainConfig(
        total_steps=settings["steps"],
        lr=settings["lr"],
        schedule=settings["schedule"],
        warmup_steps=settings["warmup_steps"],
        weight_decay=settings["weight_decay"],
        adam_betas=tuple(settings["adam_betas"]),
        adam_eps=settings["adam_eps"],
        grad_accum=settings["grad_accum"],
        clip_norm=settings["clip_norm"],
        seed=seed,
        checkpoint_every=settings["checkpoint_every"],
        desc=desc,
        # Optional settings (schema: pretrain.<objective>.compile / .prefetch); absent from a profile, the
        # defaults apply and the rule's params, hence its outputs, are unchanged.
        compile=settings.get("compile", TrainConfig.compile),
        prefetch=settings.get("prefetch", TrainConfig.prefetch),
        activation_checkpointing=settings.get("activation_checkpointing", False),
    )


def record_head(config: dict, run, model: dict, settings: dict, **extra) -> dict:
    """The fields every pretrain.json starts with, whatever made the model (trained, initialised or taken
    from the hub): which run, its model fields, the pretraining settings and the profile's config."""
    return {"profile": config["profile"], "experiment": run.experiment, "run": run.name, "run_id": run.run_id,
            "objective": run.objective, **extra, "model": model, "pretrain": settings, "config": public(config)}


def parameter_counts(model) -> dict:
    """Tables' parameter counts of a built model: total, attention, embedding and Appendix 2.8's #Emb."""
    return {"total": total_parameters(model), "attention": model_attention_parameters(model),
            "embedding": embedding_parameters(model), "word_embedding": word_embedding_parameters(model)}


def record_path(profile: str, run_id: str):
    """``results/<profile>/runs/<run_id>/pretrain.json``."""
    return paths.results_dir(profile) / "runs" / run_id / "pretrain.json"


def write_model_and_record(path, record: dict, write_model) -> None:
    """Write the model (``write_model()``) and its ``pretrain.json`` record ``path`` so that a failure
    publishes no record: the record is staged beside its destination first (so an unwritable results
    folder fails before the model is touched) and moved into place only after the model is written."""
    with atomic_path(path) as staged:
        staged.write_text(json_text(record), encoding="utf-8")
        write_model()


def pretrain(config: dict, run_id: str, keep_checkpoint: bool = False) -> dict:
    """Pretrain (or, for translation, train) the run ``run_id`` with its experiment's objective.
    ``keep_checkpoint``: leave the final training checkpoint (:attr:`PretrainObjective.keep_checkpoint`).

    Both output folders are checked writable before any work, and the run is locked against a second
    job training it at the same time (checkpointing.run_lock). Under torchrun (WORLD_SIZE > 1) every
    process calls this; rank 0 alone holds the lock and writes the outputs (see :func:`pretrain_packed`).
    """
    run = get_run(config, run_id)
    try:
        objective = OBJECTIVES.get(run.objective)
    except ConfigError as err:
        raise ConfigError(f"{config['_params_file']}: run {run_id}: {err}") from None
    rank, world_size, _, _ = init_distributed()
    try:
        if world_size > 1 and not objective.data_parallel:
            raise ConfigError(
                f"{config['_params_file']}: run {run_id}: objective {run.objective!r} trains in one process "
                f"only, but {world_size} were started (WORLD_SIZE); run it without torchrun"
            )
        with _locked_once(config, run_id, rank):
            maker = objective()
            maker.keep_checkpoint = keep_checkpoint
            return maker.run(config, run)
    finally:
        cleanup_distributed()


@contextlib.contextmanager
def _locked_once(config: dict, run_id: str, rank: int):
    """Check the output folders writable and take the run lock, on rank 0 alone (one lock per run,
    however many processes train it; the others never touch the outputs); the other ranks learn from
    rank 0 whether that went well and fail with its message if not."""
    if rank != 0:
        refused = broadcast_object(None)
        if refused is not None:
            raise TrainingError(f"rank {rank}: {refused}")
        yield
        return
    model_dir = paths.models_dir(config["profile"]) / run_id
    with contextlib.ExitStack() as stack:
        try:
            check_writable(record_path(config["profile"], run_id).parent, "the run's pretrain.json into")
            check_writable(model_dir, "the run's model into")
            stack.enter_context(run_lock(model_dir, run_id))
        except LeanLMError as exc:
            broadcast_object(str(exc))
            raise
        broadcast_object(None)
        yield


def pretrain_packed(config: dict, run, objective: PackedTextObjective) -> dict:
    """Shared runner for objectives over the packed pretraining corpus (MLM, causal LM, ...)."""
    run_id = run.run_id
    settings = pretrain_settings(config, run)
    if settings["seq_len"] > run.model["max_position"]:
        raise ConfigError(
            f"{config['_params_file']}: pretrain.{run.objective}.seq_len = {settings['seq_len']} exceeds "
            f"models.{run.backbone}.max_position = {run.model['max_position']}"
        )
    # Each of torchrun's processes runs grad_accum / WORLD_SIZE micro-batches: refuse a split that is not
    # whole before any data is read.
    local_grad_accum(settings["grad_accum"], int(os.environ.get("WORLD_SIZE", "1")),
                     f"{config['_params_file']}: pretrain.{run.objective}.grad_accum (run {run_id})")
    seed_everything(run.pretrain_seed)
    started = time.time()
    with rank_zero_first():  # rank 0 builds the cached token streams, the others then read them
        data, tokenizer, train_seqs, valid_seqs = _prepare(config, run, objective, settings)
    log.info("%s: %d training sequences of %d tokens", run_id, len(train_seqs), settings["seq_len"])
    return _train_and_write(config, run, objective, settings, started, data, tokenizer, train_seqs, valid_seqs)


def _prepare(config: dict, run, objective: PackedTextObjective, settings: dict):
    """The run's data, tokenizer and packed train/validation rows."""
    run_id = run.run_id
    data = run_data(config, run)
    corpus = data.corpus_dir
    route = input_route(run)
    packed = route.packed_corpus(config, run, corpus, settings["seq_len"])  # ch. 2's hash runs pack their own
    if packed is not None:
        tokenizer, train_seqs, valid_seqs = packed.tokenizer, packed.train, packed.validation
    else:
        # A named tokenizer (ch. 4: Pythia's BPE; ch. 2: RoBERTa's BPE) or the profile's.
        tokenizer = route.pretraining_tokenizer(config, run)
        if objective.head != "causal_lm" and uses_eos_packing(tokenizer):
            raise ConfigError(f"{config['_params_file']}: run {run_id} pretrains with {run.objective}, which needs "
                              f"the tokenizer's [CLS]/[SEP]/[MASK]; tokenizer {data.tokenizer or 'of the profile'} "
                              f"has none")
        train_seqs = pack_rows(tokenizer, corpus / "train.jsonl", settings["seq_len"], "tokenize train")
        valid_seqs = pack_rows(tokenizer, corpus / "validation.jsonl", settings["seq_len"], "tokenize validation")
    return data, tokenizer, train_seqs, valid_seqs


def _train_and_write(config: dict, run, objective: PackedTextObjective, settings: dict, started: float,
                     data, tokenizer, train_seqs, valid_seqs) -> dict:
    """Train the run's model and, on rank 0 only, score the validation split and write model + record."""
    run_id, profile = run.run_id, config["profile"]

    # Named tokenizers may pad the embedding (Pythia: 50,277 tokens -> 50,304 rows, Table 4.10).
    vocab_size = embedding_rows(tokenizer.get_vocab_size(), data.vocab_multiple)
    fields = {**run.model, "vocab_size": vocab_size}
    pad = special_token_id(tokenizer, "pad") if data.tokenizer and not hasattr(tokenizer, "codebook") else None
    if pad is not None:  # RoBERTa's <pad> is id 1: the padding row (no gradient) must be it, not <s> = 0
        fields["pad_token_id"] = pad
    model_config = ModelConfig.from_dict(fields)
    model = build_model(model_config, objective.head, **objective.head_options(settings))
    route = input_route(run)
    inputs_record = route.prepare_model(model, tokenizer, data, profile)  # ch. 4: FixedSeqQK's fixed text
    # Hash embeddings read per-token features (hash bits/buckets) that the batches carry.
    batches = route.batches(objective.batches(settings, tokenizer, train_seqs, run.pretrain_seed), model_config, tokenizer)
    clock = StepClock(settings["batch_size"] * settings["grad_accum"])  # Table 2.3's time per sample
    out_dir = paths.models_dir(profile) / run_id
    train_config = pretrain_train_config(settings, f"pretrain {run_id}", run.pretrain_seed)
    trainer = Trainer(model, train_config, batches, run_dir=out_dir, on_step_start=clock.mark)
    summary = trainer.fit()
    clock.finish()
    if trainer.rank != 0:  # rank 0 alone scores, writes and logs; the others wait for it to finish
        barrier()
        if not objective.keep_checkpoint:
            trainer.remove_checkpoint()
        return broadcast_object(None)
    device = next(model.parameters()).device
    val_loss = validation_loss(model, batches, valid_seqs, device)

    extra = {"run_id": run_id, "profile": profile}
    if data.tokenizer:
        extra["tokenizer"] = {"name": data.tokenizer, "file": "tokenizer.json"}

    def write_model() -> None:
        save_checkpoint(model, model_config, out_dir, extra=extra)
        route.save(tokenizer, out_dir)  # the hash codebook fine-tuning must hash with (hash runs only)
        # What evaluation must encode with (for hash_subword runs: the pieces their codebook hashes).
        save_run_tokenizer(getattr(tokenizer, "pieces", tokenizer), out_dir, keep=bool(data.tokenizer))

    record = {
        **record_head(config, run, model_config.to_dict(), settings),
        "summary": {k: v for k, v in summary.items() if k != "history"},
        "history": summary.get("history", []),
        "validation": {f"{objective.metric}_loss": val_loss,
                       f"{objective.metric}_perplexity": math.exp(min(val_loss, 50.0))},
        "data": {"train_sequences": len(train_seqs), "validation_sequences": len(valid_seqs),
                 "packing": "eos" if uses_eos_packing(tokenizer) else "cls_sep", **data.describe(profile),
                 **inputs_record},
        "parameters": parameter_counts(model),
        "timing": {"seconds": time.time() - started, **clock.timing()},
        "hardware": hardware(),
        # torchrun's processes (1 without); the timings above are rank 0's, the batch is the global one
        "world_size": trainer.world_size,
    }
    write_model_and_record(record_path(profile, run_id), record, write_model)
    barrier()
    if not objective.keep_checkpoint:
        trainer.remove_checkpoint()
    broadcast_object(record)
    log.info("%s: final loss %.4f, validation %s loss %.4f", run_id, summary["final_loss"], objective.metric, val_loss)
    return record
