"""Our causal LMs as an lm-evaluation-harness model (§4.4.3: the thesis evaluates with lm-eval).

:class:`LeanLMEvalAdapter` is registered with lm-eval as ``"leanlm"``. It wraps any model that follows
the project's causal-LM protocol (``model(input_ids, attention_mask=None) -> {"logits": [B, L, V]}``,
context ``model.config.max_position``) and a ``tokenizers.Tokenizer``:

- ``loglikelihood``: (context, continuation) pairs, batched longest first, the context cut from the
  left when context + continuation exceeds the model's context (lm-eval's HF model does the same);
- ``loglikelihood_rolling``: perplexity of whole documents by disjoint rolling windows
  (:func:`leanlm.evaluation.scoring.rolling_windows`, lm-eval's scheme);
- ``generate_until``: not supported (none of the thesis's tasks generates text).

:func:`run_lm_eval` evaluates a model on lm-eval tasks, by their lm-eval names (``arc_easy``,
``wikitext``, ... for the paper profile) or our packaged stand-ins (``leanlm_*`` YAMLs from
:mod:`leanlm.lm_eval.standins`, whose YAMLs are data and are only accepted when they are exactly the
config leanlm writes; also the hub mirror's redirects of lm-eval's own tasks,
:mod:`leanlm.lm_eval.mirror`), and returns plain ``{task: {metric: value}}``.

From the command line (a checkpoint directory and a tokenizer file or directory)::

    lm_eval --model leanlm --model_args model=models/smoke/<run>,tokenizer=data/smoke/tokenizer \\
        --include_path data/smoke/lm_eval_tasks --tasks leanlm_hellaswag

(``import leanlm.lm_eval.adapter`` must have run for the name to be known; the command
line needs ``python -c`` or a plugin for that, :func:`run_lm_eval` does it by itself.)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tokenizers import Tokenizer
from torch import nn

from leanlm.data.tokenizer import special_token_id
from leanlm.errors import ConfigError, DataError
from leanlm.evaluation.scoring import model_device, rolling_windows, score_windows
from leanlm.modeling.counting import total_parameters  # the tables' count: padded vocabulary rows left out

log = logging.getLogger(__name__)

# Tokens that can stand for "start of text" when a context is empty or a document starts, in order of
# preference: our causal LMs are pretrained on rows that start with [CLS] (training.objectives.pack_sequences);
# GPT-2/Pythia BPE uses <|endoftext|> for this (as lm-eval's own models do).
LOCAL_PREFIX = "leanlm_"  # the packaged stand-ins' names (leanlm.lm_eval.standins)
PREFIX_TOKENS = ("[CLS]", "<|endoftext|>", "<s>", "</s>", "[SEP]")


def _load_model(model: nn.Module | str | os.PathLike) -> nn.Module:
    if isinstance(model, nn.Module):
        return model
    from leanlm.modeling.checkpoint import load_model

    return load_model(model)


def _load_tokenizer(tokenizer: Tokenizer | str | os.PathLike) -> Tokenizer:
    if isinstance(tokenizer, Tokenizer):
        # A private copy: the caller's tokenizer may have truncation or padding switched on, which
        # would silently cut or pad what we score.
        tokenizer = Tokenizer.from_str(tokenizer.to_str())
    else:
        from leanlm.data.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(tokenizer)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def default_prefix_token_id(tokenizer: Tokenizer) -> int:
    """The id of the first of :data:`PREFIX_TOKENS` the tokenizer has."""
    for token in PREFIX_TOKENS:
        index = tokenizer.token_to_id(token)
        if index is not None:
            return index
    raise DataError(f"the tokenizer has none of {PREFIX_TOKENS} to start a text with; pass prefix_token_id")


@register_model("leanlm")
class LeanLMEvalAdapter(TemplateLM):
    """A leanlm causal LM + ``tokenizers`` tokenizer as an lm-eval ``LM``.

    ``model`` and ``tokenizer`` may be objects or paths (a checkpoint directory for
    :func:`leanlm.modeling.checkpoint.load_model`; a tokenizer.json or its directory or a profile name
    for :func:`leanlm.data.tokenizer.load_tokenizer`). The model is put in eval mode on ``device``
    (None: where it already is).
    ``max_length`` defaults to ``model.config.max_position``; a smaller one evaluates with a shorter
    context (Table 4.4).
    """

    backend = "causal"

    def __init__(
        self,
        model: nn.Module | str | os.PathLike,
        tokenizer: Tokenizer | str | os.PathLike,
        batch_size: int | str | None = 8,
        device: str | torch.device | None = "cpu",
        max_length: int | str | None = None,
        prefix_token_id: int | str | None = None,
        **unused: Any,
    ) -> None:
        super().__init__()
        # lm-eval passes max_batch_size (and, from the command line, strings); ignore the rest loudly.
        unused.pop("max_batch_size", None)
        if unused:
            log.warning("leanlm adapter: ignoring arguments %s", sorted(unused))
        if batch_size in (None, "auto") or str(batch_size).startswith("auto"):
            batch_size = 8  # no automatic search: one fixed size keeps runs comparable
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ConfigError(f"lm-eval batch_size={batch_size} must be a positive integer")
        model = _load_model(model)
        # device=None keeps the model where it is (e.g. already on a GPU).
        self._device = torch.device(device) if device is not None else model_device(model)
        self.model = model.to(self._device).eval()
        self.tokenizer = _load_tokenizer(tokenizer)
        config = getattr(self.model, "config", None)
        context = max_length if max_length is not None else getattr(config, "max_position", None)
        if context is None:
            raise ConfigError("the model has no config.max_position; pass max_length to the lm-eval adapter")
        self._max_length = int(context)
        if self._max_length < 2:
            raise ConfigError(f"max_length={context} is too short to score anything")
        self._prefix = int(prefix_token_id) if prefix_token_id is not None else default_prefix_token_id(self.tokenizer)
        pad = special_token_id(self.tokenizer, "pad")  # [PAD] or <pad>; else the prefix token
        self._pad = pad if pad is not None else self._prefix

    # ------------------------------------------------------------------ what TemplateLM needs
    @property
    def eot_token_id(self) -> int:
        return self._prefix

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        # Fingerprints lm-eval's request cache: the vocabulary size and the prefix tell tokenizers apart.
        return f"leanlm-{self.tokenizer.get_vocab_size(with_added_tokens=True)}-{self._prefix}"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        # Never [CLS] ... [SEP] around a piece of text: contexts and continuations are concatenated.
        return self.tokenizer.encode(string, add_special_tokens=False).ids

    def tok_decode(self, tokens: list[int], **kwargs: Any) -> str:
        return self.tokenizer.decode(tokens)

    def _score(self, windows) -> list[tuple[float, bool]]:
        return score_windows(self.model, windows, self._max_length, self.batch_size, self._device, self._pad)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """``requests``: ``((context, continuation), context_ids, continuation_ids)`` from TemplateLM."""
        results = self._score([(context_ids, continuation_ids) for _, context_ids, continuation_ids in requests])
        for (pair, _, _), result in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", pair, result)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Total log-likelihood of each request's text, scored once per token in disjoint windows."""
        windows, owner = [], []
        for index, (text,) in enumerate(req.args for req in requests):
            for window in rolling_windows(self.tok_encode(text), self._prefix, self._max_length):
                windows.append(window)
                owner.append(index)
        totals = [0.0] * len(requests)
        for index, (logprob, _) in zip(owner, self._score(windows)):
            totals[index] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        # lm-eval's interface has this method; asking it of us is a task choice a person can fix.
        raise ConfigError(
            "the leanlm lm-eval adapter scores text but does not generate it; the thesis's tasks "
            "(ch. 4: multiple choice, perplexity, LAMBADA) need only loglikelihood. Choose tasks whose "
            "output_type is multiple_choice, loglikelihood or loglikelihood_rolling."
        )

    def get_model_info(self) -> dict:
        parameters = list(self.model.parameters())
        return {"model_num_parameters": total_parameters(self.model), "max_length": self._max_length,
                "model_dtype": str(parameters[0].dtype) if parameters else None}


# ---------------------------------------------------------------------- running tasks
# Where an evaluation's tasks come from (runners get it from leanlm.lm_eval.stage.lm_eval_include):
# a folder of leanlm's packaged stand-ins (data: every YAML is checked against the config leanlm writes,
# leanlm.lm_eval.standins.standin_config), ready configs by task name (the hub mirror's redirects of
# lm-eval's own tasks, leanlm.lm_eval.mirror), or None. lm-eval's TaskManager never gets a folder to
# scan: a task YAML found there could run code (a !function tag, an include, a Jinja template).
TaskSource = str | os.PathLike | Mapping[str, dict] | None


def _task_specs(tasks: list[str], source: TaskSource) -> tuple[list, bool]:
    """What to hand TaskManager.load (configs for the stand-ins and mirrored tasks, lm-eval task names for
    the rest), and whether lm-eval's own task index is needed (it takes seconds to build, so it is only
    built when some task is named)."""
    from leanlm.lm_eval.standins import standin_config

    specs, needs_defaults = [], False
    for name in tasks:
        if isinstance(source, Mapping) and name in source:
            specs.append(dict(source[name]))
        elif name.startswith(LOCAL_PREFIX):
            if source is None or isinstance(source, Mapping):
                raise ConfigError(f"lm-eval task {name!r} is one of our packaged stand-ins but no stand-in folder "
                                  f"was given; the packaged source writes them to data/<profile>/tasks/lm_eval")
            if not Path(source).is_dir():
                raise DataError(f"lm-eval stand-in folder {source} is not a directory; build the local tasks first")
            specs.append(standin_config(Path(source), name))
        else:
            specs.append(name)
            needs_defaults = True
    return specs, needs_defaults


def task_manager(needs_defaults: bool):
    """lm-eval's TaskManager over its own installed tasks only (never an include_path: see TaskSource)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=None, include_defaults=needs_defaults)


def _plain_metrics(task_results: dict) -> dict[str, float]:
    """lm-eval's ``{"acc,none": v, "acc_stderr,none": s, "alias": ...}`` -> ``{"acc": v, "acc_stderr": s}``."""
    out = {}
    for key, value in task_results.items():
        if key == "alias" or not isinstance(value, (int, float)):
            continue
        metric, _, filter_name = key.partition(",")
        out[metric if filter_name in ("", "none") else key] = float(value)
    return out


def run_lm_eval(
    model: nn.Module | LeanLMEvalAdapter,
    tokenizer: Tokenizer | None,
    tasks: list[str],
    include_path: TaskSource,
    limit: int | float | None = None,
    batch_size: int = 8,
    device: str | None = "cpu",
    *,
    max_length: int | None = None,
    bootstrap_iters: int = 1000,
    seed: int = 1234,
    samples: dict | None = None,
) -> dict[str, dict[str, float]]:
    """Evaluate ``model`` on lm-eval ``tasks`` zero-shot, offline; return ``{task: {metric: value}}``.

    ``include_path`` says where tasks come from (:data:`TaskSource`): the folder of our packaged stand-ins
    (``leanlm_*``, each checked against the config leanlm writes), or configs by task name (the hub
    mirror's redirects); other names are lm-eval's own tasks. Metrics keep lm-eval's names (``acc``, ``acc_norm``,
    ``word_perplexity``, ``perplexity``, ... and their ``*_stderr``); accuracies are fractions.
    ``bootstrap_iters`` sets lm-eval's bootstrap for the standard errors of perplexities (its default of
    100000 takes minutes on a CPU; 0 skips them). ``samples``, when given a dict, receives each task's
    per-document metric values (``{task: [{metric: value}, ...]}`` in document order), which lm-eval
    logs with ``log_samples``.
    """
    import lm_eval

    if not tasks:
        raise ConfigError("run_lm_eval: no tasks given")
    lm = model if isinstance(model, LeanLMEvalAdapter) else LeanLMEvalAdapter(
        model, tokenizer, batch_size=batch_size, device=device, max_length=max_length)
    specs, needs_defaults = _task_specs(list(tasks), include_path)
    manager = task_manager(needs_defaults)
    try:
        output = lm_eval.simple_evaluate(
            model=lm, tasks=specs, limit=limit, task_manager=manager, bootstrap_iters=bootstrap_iters,
            log_samples=samples is not None, random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
    except KeyError as err:
        raise ConfigError(f"lm-eval does not know task(s) among {list(tasks)} ({err})") from None
    if output is None:  # not rank 0
        return {}
    if samples is not None:
        for task, logged in (output.get("samples") or {}).items():
            ordered = sorted(logged, key=lambda example: example["doc_id"])
            samples[task] = [{m: example[m] for m in example["metrics"] if m in example} for example in ordered]
    return {task: _plain_metrics(values) for task, values in output["results"].items()}
