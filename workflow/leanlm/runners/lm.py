"""The ``lm`` task runner: test perplexity of a causal LM (Table 3.2's WIKITEXT-103 and PENN TREEBANK
columns; Table 3.14).

The decoder (checkpoint kind ``causal_lm``) reads the task's test split, the rows joined with blank
lines in ``idx`` order (the reference recipe joins WikiText's lines with ``"\\n\\n"``) and tokenised with
the profile's tokenizer without special tokens, in sliding windows
(:func:`leanlm.evaluation.perplexity.strided_perplexity`). Table 3.2 reports these perplexities "over
five runs", so (DESIGN §8) with ``fine_tune`` set the pretrained decoder is first fine-tuned on the
task's train split with that seed (:mod:`leanlm.stages.lm_finetune`; Table 3.12's settings) and the
family runs once per seed; without it (zero-shot, an option) the result does not depend on the seed and
runs once per model (``seeded = False``).

Settings, from the profile's ``finetune.<family>`` block (all optional):

- ``stride``: window stride in tokens (default 256, §3.4.5);
- ``max_length``: window length (default: the model's context, ``config.max_tokens``: 512 in §3.4.3);
- ``batch_size``: windows per forward pass (default 8);
- ``max_tokens``: evaluate only the first this many tokens of the stream (null: all of it; a cap
  keeps the smoke profile fast);
- ``fine_tune``: the fine-tuning settings (:mod:`leanlm.stages.lm_finetune`), or null for zero-shot.
"""

from __future__ import annotations

import logging
import time

import torch
from tokenizers import Tokenizer

from leanlm import paths
from leanlm.data.tasks import get_task
from leanlm.errors import ConfigError, DataError, TrainingError
from leanlm.evaluation import per_example
from leanlm.evaluation.metrics import compute_all
from leanlm.evaluation.perplexity import strided_perplexity
from leanlm.evaluation.protocol import THESIS_STRIDE
from leanlm.modeling.checkpoint import load_model
from leanlm.stages.finetune import TaskRunner, _load_split
from leanlm.stages.lm_finetune import fine_tune_lm, untruncated
from leanlm.training.seeding import seed_everything

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 8
ROW_SEPARATOR = "\n\n"


def stream_token_ids(tokenizer: Tokenizer, rows: list[dict]) -> torch.Tensor:
    """The token ids of the rows' texts, in ``idx`` order, joined with blank lines (no special tokens)."""
    ordered = sorted(rows, key=lambda r: r["idx"])
    text = ROW_SEPARATOR.join(r["text"] for r in ordered)
    return torch.tensor(untruncated(tokenizer).encode(text, add_special_tokens=False).ids, dtype=torch.long)


def _setting(settings: dict, key: str, default, family: str) -> int:
    value = settings.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"key finetune.{family}.{key} = {value!r} must be a positive integer")
    return value


class PerplexityRunner(TaskRunner):
    """Test perplexity of the run's causal LM on one ``lm`` task: fine-tuned on its train split with the
    seed (``fine_tune`` set), or the pretrained model zero-shot (seed-independent)."""

    seeded = False

    @classmethod
    def is_seeded(cls, settings: dict) -> bool:
        return settings.get("fine_tune") is not None

    def __call__(self, config: dict, run_id: str, family: str, task: str, seed: int, tokenizer) -> dict:
        profile, settings = config["profile"], config["finetune"][family]
        spec = get_task(task)
        checkpoint = paths.models_dir(profile) / run_id
        try:
            model = load_model(checkpoint, kind="causal_lm")
        except (ConfigError, TrainingError) as err:
            raise ConfigError(f"task {task} (family {family}) measures the perplexity of a causal LM, and the "
                              f"model of run {run_id} at {checkpoint} cannot be loaded as one: {err}") from None
        stride = _setting(settings, "stride", THESIS_STRIDE, family)
        max_length = _setting(settings, "max_length", model.config.max_tokens, family)
        if max_length > model.config.max_tokens:
            raise ConfigError(f"key finetune.{family}.max_length = {max_length} exceeds the model's context of "
                              f"{model.config.max_tokens} tokens (models.*.max_position); lower it or leave it null")
        if stride > max_length:
            raise ConfigError(f"key finetune.{family}.stride = {stride} exceeds the window of {max_length} tokens; "
                              f"tokens between windows would never be scored")
        batch_size = _setting(settings, "batch_size", DEFAULT_BATCH_SIZE, family)

        rows = _load_split(profile, task, "test")
        token_ids = stream_token_ids(tokenizer, rows)
        stream_tokens = token_ids.numel()
        max_tokens = _setting(settings, "max_tokens", None, family)
        if max_tokens is not None:
            token_ids = token_ids[:max_tokens]
        if token_ids.numel() < 2:
            raise DataError(f"task {task}: the test split tokenises to {token_ids.numel()} token(s); "
                            f"rebuild the task set (`leanlm data tasks`)")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)
        started = time.time()
        tuning = settings.get("fine_tune")
        fine_tuned = {}
        if tuning is not None:
            seed_everything(seed)
            fine_tuned = fine_tune_lm(
                model, _load_split(profile, task, "train"),
                stream_token_ids(tokenizer, _load_split(profile, task, "validation"))[: max_tokens or None],
                tuning, tokenizer=tokenizer, task=task, run_id=run_id, seed=seed, max_length=max_length, stride=stride,
                eval_batch_size=batch_size, scratch=checkpoint / "finetune" / f"{task}-seed{seed}")
        result = strided_perplexity(model, token_ids, max_length=max_length, stride=stride, batch_size=batch_size)
        metrics = compute_all(spec.metrics, result["window_nll"], result["window_tokens"])
        log.info("%s %s: test perplexity %.3f over %d tokens (%d windows of %d, stride %d)", run_id, task,
                 result["perplexity"], result["tokens"], result["windows"], max_length, stride)
        return {
            "task": task,
            "seed": seed,
            "split": "test",  # the thesis reports test-set perplexity (Table 3.2)
            "fine_tuned": tuning is not None,
            **fine_tuned,
            "metrics": metrics,
            "primary_metric": spec.primary_metric,
            "primary": metrics[spec.primary_metric],
            # Per-window summed NLL and scored tokens: a claim's bootstrap resamples the windows (blocks).
            "per_example": per_example.scores(
                {"nll": result["window_nll"], "tokens": result["window_tokens"]},
                {m: ["perplexity", {"nll": "nll", "units": "tokens"}] for m in spec.metrics if m == "perplexity"}),
            "nll": result["nll"],
            "tokens": result["tokens"],
            "windows": result["windows"],
            "max_length": max_length,
            "stride": stride,
            "test_rows": len(rows),
            "stream_tokens": stream_tokens,  # before the max_tokens cap
            "eval_seconds": time.time() - started,
        }


Runner = PerplexityRunner
