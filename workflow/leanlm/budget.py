"""The compute and disk budget of a profile, computed from its runs (``leanlm budget --params ...``).

Pretraining compute is exact bookkeeping over the instantiated models (built on PyTorch's ``meta``
device, so a 1.7B model costs no memory) and the profile's schedule::

    tokens      = steps x batch_size x grad_accum x seq_len          (the global batch; DESIGN §8)
    FLOPs/token = 6 N  +  12 seq_len sum_layers(h_scores d_h)  +  6 V d f_out

N: non-embedding parameters (every matmul weight: 2 FLOPs forward, 4 backward). The second term is
softmax attention's QK^T and AV (Kaplan et al. 2020; PaLM's MFU accounting); token mixers without
per-head score maps (FNet, Linear, Approximate, MLP, Non-approximate) add only their weights. The last
term is the output projection over the vocabulary at the predicted positions (f_out = the masking
rate for MLM and Shuffle+Random, 1 for causal LM and translation), which 6N leaves out when the
decoder's embedding is tied or untied alike. Norms, activations and softmax are not counted, so the
hours below are what the FLOPs need at the stated MFU: a floor if the real MFU is lower.

Fine-tuning is counted as example passes (tasks x seeds x epochs x train examples)
at a stated mean length (``--finetune-tokens``), since batches pad to the longest example in the
batch, not to ``max_seq_len``; the train-split sizes are the hub datasets' (read from the prepared
task data when it exists, else :data:`HUB_TRAIN_EXAMPLES`). The lm family's fine-tuning (DESIGN §8) is
counted in windows of its ``max_length`` over :data:`HUB_TRAIN_TOKENS`. Early stopping can only shorten
them; zero-shot evaluation (lm-eval, perplexity, BLEU) is one pass over the test sets and not counted.

Disk: checkpoints are exact byte counts (fp32 weights, padded vocabulary rows included; a resumable
checkpoint adds AdamW's two moments, held once per run while it trains); a token stream holds its corpus
once (2 bytes a token below 65,536 ids, 4 above), capped by what the longest schedule over it reads.

GPU memory: every pretraining run's peak at its micro-batch, with and without activation checkpointing
(:func:`run_memories`, estimated by :mod:`leanlm.memory`; docs/memory.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from leanlm.errors import ConfigError

# Train-split sizes of the thesis's fine-tuning datasets, from each hub dataset's card (split
# "train"; GLUE/SuperGLUE: the official train sets; WMT-14: de-en's 4,508,785 pairs). Used only when
# the task data of the profile has not been prepared yet; a prepared train split is counted instead.
HUB_TRAIN_EXAMPLES: dict[str, int] = {
    "mnli": 392_702, "qnli": 104_743, "qqp": 363_846, "rte": 2_490, "sst2": 67_349, "mrpc": 3_668,
    "cola": 8_551, "stsb": 5_749,
    "boolq": 9_427, "cb": 250, "sg_rte": 2_490, "wic": 5_428, "multirc": 27_243, "copa": 400, "wsc": 554,
    "squad_v1": 87_599, "squad_v2": 130_319,
}

# Train-split sizes of the language-modelling benchmarks the lm family fine-tunes on (DESIGN §8), in the
# datasets' own word-level tokens (WikiText-103: 103,227,021; PTB: 887,521); subword tokenizers cut a
# little finer, so these are a floor.
HUB_TRAIN_TOKENS: dict[str, int] = {"wikitext103": 103_227_021, "ptb": 887_521}

# Vocabulary sizes of the hub tokenizers the paper profile names (tokenizer.json of each hub id), used
# when the tokenizer has not been downloaded into data/<profile>/ yet.
HUB_TOKENIZER_VOCAB: dict[str, int] = {
    "google-bert/bert-base-uncased": 30_522,
    "EleutherAI/pythia-160m": 50_277,
    "FacebookAI/roberta-base": 50_265,
}

# Tokens in the hub corpora the paper profile pretrains on, where a schedule reads more than the corpus
# holds (a token stream stores the corpus once, whatever the number of epochs): Wikipedia + BookCorpus
# are BERT's 3.3B words (Devlin et al. 2019), about 4B WordPiece tokens; SlimPajama is read up to the
# thesis's 15B-token budget (§4.4.2; data.corpora.slimpajama.max_documents is sized to hold it).
HUB_CORPUS_TOKENS: dict[str, float] = {"corpus": 4.0e9, "slimpajama": 15.0e9}

# Objectives and the model head they train (leanlm's pretraining objectives; "none" and "hub" have
# no pretraining step).
_HEADS = {"mlm": "mlm", "shuffle_random": "shuffle_random", "causal_lm": "causal_lm", "translation": "seq2seq"}


@dataclass
class RunBudget:
    run_id: str
    chapter: str
    parameters: int
    non_embedding: int
    score_width: int            # sum over layers of score maps x head dim (see score_width)
    tokens: int
    flops_per_token: int
    checkpoint_bytes: int       # the final model.safetensors (fp32)
    training_state_bytes: int   # a resumable checkpoint: weights + AdamW moments (fp32)

    @property
    def flops(self) -> float:
        return float(self.tokens) * self.flops_per_token


@dataclass
class FinetuneBudget:
    run_id: str
    chapter: str
    family: str
    example_passes: int
    flops_per_token: int
    tokens_per_example: int

    @property
    def flops(self) -> float:
        return float(self.example_passes) * self.tokens_per_example * self.flops_per_token


@dataclass
class Budget:
    profile: str
    pretrain: list[RunBudget] = field(default_factory=list)
    finetune: list[FinetuneBudget] = field(default_factory=list)
    stream_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def chapter_of(run_id: str) -> str:
    return run_id.split("_", 1)[0]


def _tokenizer_vocab(config: dict, spec: dict, where: str) -> int:
    """Vocabulary size of a tokenizer block (``data.tokenizer`` or ``data.tokenizers.<name>``)."""
    if spec.get("kind") == "wordpiece":
        return int(spec["vocab_size"])
    name = spec.get("name", "")
    if name in HUB_TOKENIZER_VOCAB:
        return HUB_TOKENIZER_VOCAB[name]
    raise ConfigError(f"{config['_params_file']}: {where} names hub tokenizer {name!r}, whose vocabulary size "
                      f"the budget does not know; add it to leanlm.budget.HUB_TOKENIZER_VOCAB")


def _vocab_rows(config: dict, run, settings: dict) -> int:
    from leanlm.data.pretrain_data import embedding_rows

    if run.objective == "translation":
        return int(settings["vocab_size"])
    if run.tokenizer not in ("profile", "", None) and run.tokenizer not in config["data"].get("tokenizers", {}):
        return 1  # ch. 2 hash codebooks: the embedding is the hash model's own, counted when built
    if run.pretrain_tokenizer:
        spec = config["data"]["tokenizers"][run.pretrain_tokenizer]
        vocab = _tokenizer_vocab(config, spec, f"data.tokenizers.{run.pretrain_tokenizer}")
        return embedding_rows(vocab, spec.get("vocab_multiple", 1))
    return _tokenizer_vocab(config, config["data"]["tokenizer"], "data.tokenizer")


def run_model_config(config: dict, run, settings: dict):
    """The ModelConfig run ``run`` trains: its model fields and its tokenizer's vocabulary."""
    from leanlm.modeling.config import ModelConfig

    fields = {**run.model, "vocab_size": _vocab_rows(config, run, settings)}
    return ModelConfig.from_dict(fields, where=f"run {run.run_id}")


def head_options(run, settings: dict) -> dict:
    """The keyword arguments of the ``_HEADS`` model the run's pretraining builds, as its objective picks them
    from the pretraining block (S+R's ``head: official_code``: no dense + GELU + LayerNorm, d^2 + 3d fewer
    parameters), so that the estimates are of the model the job trains."""
    from leanlm.plugins import OBJECTIVES

    return OBJECTIVES.get(run.objective)().head_options(settings)


def _meta_model(config: dict, run, settings: dict):
    from leanlm.modeling.models import build_model

    model_config = run_model_config(config, run, settings)
    with torch.device("meta"):
        return build_model(model_config, _HEADS[run.objective], **head_options(run, settings)), model_config


def pretrained_runs(config: dict) -> list:
    """The runs with a pretraining step of their own (not evaluating another run's model)."""
    from leanlm.runs import runs

    return [run for run in runs(config) if run.objective in _HEADS and not run.evaluate_from]


def run_memories(config: dict, both: bool = True) -> list:
    """Every pretraining run's GPU memory (leanlm.memory.RunMemory), with and without activation
    checkpointing (``both``) or as configured only."""
    from leanlm.memory import run_memory
    from leanlm.runs import pretrain_settings

    out = []
    for run in pretrained_runs(config):
        settings = pretrain_settings(config, run)
        out.append(run_memory(run.run_id, _HEADS[run.objective], run_model_config(config, run, settings), settings,
                              both, head_options=head_options(run, settings)))
    return out


def score_width(model) -> int:
    """Sum over layers of (score maps x head dim): what softmax attention's QK^T and AV cost per token
    and context position (12 FLOPs each, forward + backward)."""
    from leanlm.modeling.counting import attention_blocks
    from leanlm.modeling.mixers.standard import StandardAttention

    total = sum(block.score_heads * block.head_dim for block in attention_blocks(model))
    return total + sum(m.n_heads * m.head_dim for m in model.modules() if isinstance(m, StandardAttention))


def output_flops_per_token(model_config, objective: str, settings: dict) -> int:
    fraction = settings.get("mask_prob", 0.0) if objective == "mlm" else 1.0
    if objective == "shuffle_random":  # the token-level 3-way head, at every position
        return 6 * 3 * model_config.d_model
    return int(round(6 * model_config.vocab_size * model_config.d_model * fraction))


def pretrain_budget(config: dict, run) -> RunBudget:
    from leanlm.modeling.counting import non_embedding_parameters, total_parameters
    from leanlm.runs import pretrain_settings

    settings = pretrain_settings(config, run)
    model, model_config = _meta_model(config, run, settings)
    seq_len, width = settings["seq_len"], score_width(model)
    per_token = (6 * non_embedding_parameters(model) + 12 * seq_len * width
                 + output_flops_per_token(model_config, run.objective, settings))
    tokens = settings["steps"] * settings["batch_size"] * settings.get("grad_accum", 1) * seq_len
    params = total_parameters(model)
    stored = sum(p.numel() for p in model.parameters())  # what a checkpoint holds: padded vocabulary rows too
    return RunBudget(run.run_id, chapter_of(run.run_id), params, non_embedding_parameters(model), width, tokens,
                     per_token, checkpoint_bytes=4 * stored, training_state_bytes=12 * stored)


def _train_examples(config: dict, family: str, task: str) -> int | None:
    from leanlm import paths

    prepared = paths.data_dir(config["profile"]) / "tasks" / task / "train.jsonl"
    if prepared.exists():
        with prepared.open("rb") as handle:
            return sum(1 for _ in handle)
    return HUB_TRAIN_EXAMPLES.get(task) if config["source"] == "hub" else None


def finetune_budgets(config: dict, run, pretrained: dict[str, RunBudget], tokens_per_example: int,
                     notes: list[str]) -> list[FinetuneBudget]:
    """Example passes of the run's epoch-based fine-tuning families (GLUE, SuperGLUE, SQuAD)."""
    from leanlm.runs import finetune_seeds, finetune_settings

    source = pretrained.get(run.evaluate_from or run.run_id)
    out = []
    for family in run.finetune:
        settings = finetune_settings(config, run, family)
        if source is None:
            continue
        if settings.get("fine_tune"):  # the lm family: causal-LM fine-tuning on each benchmark's train text
            out.extend(_lm_finetune_budgets(config, run, family, settings, source, notes))
            continue
        if "epochs" not in settings:
            continue  # zero-shot evaluation (lm-eval, perplexity, BLEU): a single pass over the eval sets
        passes = 0
        for task in settings["tasks"]:
            examples = _train_examples(config, family, task)
            if examples is None:
                notes.append(f"{family}/{task}: train size unknown, not counted")
                continue
            passes += examples * settings["epochs"] * len(finetune_seeds(config, run, family))
        # The pretrained backbone at the fine-tuning length; the task heads are a rounding error.
        per_token = 6 * source.non_embedding + 12 * tokens_per_example * source.score_width
        out.append(FinetuneBudget(run.run_id, chapter_of(run.run_id), family, passes, per_token, tokens_per_example))
    return out


def _lm_finetune_budgets(config: dict, run, family: str, settings: dict, source: RunBudget,
                         notes: list[str]) -> list[FinetuneBudget]:
    """The lm family fine-tunes on windows of ``max_length`` tokens of each train text, per seed; counted
    as one "example" per token so that tokens_per_example is the window length."""
    from leanlm.runs import finetune_seeds

    tune, window = settings["fine_tune"], settings["max_length"]
    tokens = 0
    for task in settings["tasks"]:
        if config["source"] != "hub" or task not in HUB_TRAIN_TOKENS:
            notes.append(f"{family}/{task}: train size unknown, not counted")
            continue
        task_tokens = HUB_TRAIN_TOKENS[task]
        if tune.get("max_train_tokens"):
            task_tokens = min(task_tokens, tune["max_train_tokens"])
        tokens += task_tokens * tune["epochs"] * len(finetune_seeds(config, run, family))
    per_token = 6 * source.non_embedding + 12 * window * source.score_width
    return [FinetuneBudget(run.run_id, chapter_of(run.run_id), family, tokens // window, per_token, window)]


def budget(config: dict, tokens_per_example: int = 128) -> Budget:
    from leanlm.runs import runs

    result = Budget(config["profile"])
    pretrained: dict[str, RunBudget] = {}
    every = runs(config, with_replicas=True)  # each pretraining replica costs a run's budget
    for run in every:
        if run.objective in _HEADS and not run.evaluate_from:
            pretrained[run.run_id] = pretrain_budget(config, run)
    result.pretrain = list(pretrained.values())
    for run in every:
        result.finetune.extend(finetune_budgets(config, run, pretrained, tokens_per_example, result.notes))
    counts: dict[str, int] = {}
    for note in result.notes:
        counts[note] = counts.get(note, 0) + 1
    result.notes = [f"{note} ({n} runs)" for note, n in counts.items()]
    # One token stream per (corpus, tokenizer) at least as long as the longest schedule that reads it.
    longest: dict[tuple[str, str], tuple[int, int]] = {}
    for run in every:
        if run.run_id in pretrained and run.objective != "translation":
            key = (run.pretrain_corpus or "corpus", run.pretrain_tokenizer or run.tokenizer)
            b = pretrained[run.run_id]
            vocab = _vocab_rows(config, run, {})
            width = 2 if vocab <= 65_536 else 4
            tokens = b.tokens
            if config["source"] == "hub" and key[0] in HUB_CORPUS_TOKENS:
                tokens = min(tokens, int(HUB_CORPUS_TOKENS[key[0]]))
            longest[key] = max(longest.get(key, (0, width)), (tokens, width))
    result.stream_bytes = sum(tokens * width for tokens, width in longest.values())
    return result


def gpu_hours(flops: float, peak_flops: float, mfu: float) -> float:
    return flops / (peak_flops * mfu) / 3600.0


def report(result: Budget, peak_flops: float, mfu: float, device: str) -> str:
    """A Markdown report: GPU-hours per chapter and stage, then disk."""
    chapters = sorted({b.chapter for b in result.pretrain} | {f.chapter for f in result.finetune})
    lines = [f"Budget of profile `{result.profile}` at {mfu:.0%} MFU of {device} "
             f"({peak_flops / 1e12:.0f} TFLOP/s bf16 dense):", "",
             "| chapter | pretrained models | pretraining GPU-h | fine-tuning GPU-h | total GPU-h |",
             "|---|---:|---:|---:|---:|"]
    total_pre = total_ft = 0.0
    for ch in chapters:
        pre = sum(gpu_hours(b.flops, peak_flops, mfu) for b in result.pretrain if b.chapter == ch)
        ft = sum(gpu_hours(f.flops, peak_flops, mfu) for f in result.finetune if f.chapter == ch)
        n = sum(1 for b in result.pretrain if b.chapter == ch)
        lines.append(f"| {ch} | {n} | {pre:,.0f} | {ft:,.0f} | {pre + ft:,.0f} |")
        total_pre, total_ft = total_pre + pre, total_ft + ft
    lines.append(f"| all | {len(result.pretrain)} | {total_pre:,.0f} | {total_ft:,.0f} | {total_pre + total_ft:,.0f} |")
    ckpt = sum(b.checkpoint_bytes for b in result.pretrain)
    state = max((b.training_state_bytes for b in result.pretrain), default=0)
    lines += ["", "| disk | GB |", "|---|---:|",
              f"| final checkpoints (fp32 safetensors, every pretrained model) | {ckpt / 1e9:,.1f} |",
              f"| one resumable training state while a run trains (largest run; one per concurrent job) | {state / 1e9:,.1f} |",
              f"| token streams (one per corpus and tokenizer: the corpus, or what the longest schedule reads if less) | {result.stream_bytes / 1e9:,.1f} |"]
    if result.finetune:
        lines += ["", f"Fine-tuning at {result.finetune[0].tokens_per_example} tokens per example (mean length; "
                      "set with --finetune-tokens); zero-shot evaluations are not counted."]
    lines += [f"Note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def to_json(result: Budget, memories: list | None = None) -> str:
    """The budget's numbers as JSON; ``memories`` (leanlm.memory.RunMemory) add each run's peak GPU memory
    in bytes, with and without activation checkpointing."""
    memory = [{**m.__dict__, "peak": m.peak(), "peak_plain": m.peak(False), "peak_checkpointed": m.peak(True)}
              for m in memories or []]
    return json.dumps({"profile": result.profile,
                       "pretrain": [{**b.__dict__, "flops": b.flops} for b in result.pretrain],
                       "finetune": [{**f.__dict__, "flops": f.flops} for f in result.finetune],
                       "stream_bytes": result.stream_bytes, "notes": result.notes, "memory": memory}, indent=1)


def check_fraction(mfu: float) -> float:
    if not (0 < mfu <= 1) or math.isnan(mfu):
        raise ConfigError(f"--mfu must be in (0, 1], got {mfu}")
    return mfu
