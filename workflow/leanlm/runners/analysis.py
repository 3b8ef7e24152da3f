"""The ``analysis`` family runner: what chapter 4's figures and Table 4.4 read from a trained model,
written to ``results/<profile>/runs/<run_id>/analysis.json`` (by :func:`leanlm.stages.finetune.finetune`).

The held-out text is the lm_eval family's WikiText task (params/tasks/lm_eval.yaml, family analysis): lm-eval's
``wikitext`` in the paper profile (on the hub mirror's copy of its data when a mirror is set,
:mod:`leanlm.lm_eval.mirror`), the packaged ``leanlm_wikitext`` stand-in otherwise, its documents
read through lm-eval (the first ``limit``) and tokenised as the lm-eval adapter tokenises them, with the
tokenizer the model was trained with (:func:`leanlm.training.run_tokenizer.evaluation_tokenizer`). The one
result (``task: attention_analysis``, seed-independent) holds

- ``metrics``: ``perplexity`` (word perplexity of the documents at the model's full context, the
  primary metric; the lm_eval family's WikiText ``word_perplexity`` when both read the same documents),
  ``perplexity_ctx<L>`` for each context length, and the layer means of the raw indicators
  (``ENTROPY``, ``CONC``, ``HEADDIV``, ``LOCFOC_0..3``, ``SINK``) over the layers that form a map;
- ``context_length_perplexity``: ``{"lengths", "perplexity": {L: ppl}, "units": "words", "words",
  "documents"}`` (Table 4.4: 128..2048, lengths beyond the model's ``max_position`` left out, and
  ``max_position`` itself always measured);
- ``attention``: :func:`leanlm.evaluation.attention_analysis.attention_profile` over ``indicator_sequences``
  windows of ``indicator_tokens`` tokens (capped at ``max_position``): per-layer and per-head
  indicators, their §4.4 normalisation and per-layer ``|logit|`` histograms.

Settings (``finetune.analysis``): ``tasks``, ``batch_size``, ``limit`` (documents), ``context_lengths``,
``indicator_tokens``, ``indicator_sequences``.
"""

from __future__ import annotations

import logging
import re
import time

from leanlm.lm_eval.stage import lm_eval_include
from leanlm.data.tasks import get_task
from leanlm.errors import DataError
from leanlm.evaluation import per_example
from leanlm.evaluation.indicators import CONTEXT_LENGTHS
from leanlm.stages.finetune import TaskRunner
from leanlm.runners.lm_eval import check_local_tasks, load_evaluated_model, task_name

log = logging.getLogger(__name__)

DEFAULT_INDICATOR_TOKENS = 1024
DEFAULT_INDICATOR_SEQUENCES = 8


def document_texts(task, limit=None) -> list[str]:
    """The texts lm-eval scores for a rolling-perplexity task (its ``doc_to_target``), first ``limit``."""
    from leanlm.lm_eval.baselines import evaluated_docs

    if task.config.output_type != "loglikelihood_rolling":
        raise DataError(f"the analysis reads a rolling-perplexity task (WikiText); lm-eval task {task.config.task} "
                        f"is {task.config.output_type}")
    return [task.doc_to_target(doc) for doc in evaluated_docs(task, limit)]


def word_count(text: str) -> int:
    """Words as lm-eval counts them for word perplexity."""
    return len(re.split(r"\s+", text))


class AttentionAnalysisRunner(TaskRunner):
    """Indicators, logit histograms and context-length perplexity of the run's trained model."""

    seeded = False

    def __call__(self, config: dict, run_id: str, family: str, task: str, seed: int, tokenizer) -> dict:
        from leanlm.evaluation.attention_analysis import attention_profile, token_windows
        from leanlm.evaluation.indicators import context_length_perplexity
        from leanlm.lm_eval.adapter import LeanLMEvalAdapter
        from leanlm.lm_eval.baselines import load_lm_eval_tasks
        from leanlm.training.run_tokenizer import evaluation_tokenizer

        tokenizer = evaluation_tokenizer(config, run_id, tokenizer)  # the one the model was trained with
        settings = config["finetune"][family]
        spec = get_task(task)
        name = task_name(config, task)
        check_local_tasks(config, [name])
        model = load_evaluated_model(config, run_id)
        started = time.time()
        with lm_eval_include(config, [name]) as include:
            texts = document_texts(load_lm_eval_tasks([name], include)[name], settings.get("limit"))
        adapter = LeanLMEvalAdapter(model, tokenizer, batch_size=settings["batch_size"], device=None)
        documents = [adapter.tok_encode(text) for text in texts]
        words = sum(word_count(text) for text in texts)
        max_position = model.config.max_position
        lengths = sorted({int(n) for n in settings.get("context_lengths", CONTEXT_LENGTHS) if n <= max_position}
                         | {max_position})
        document_nll: dict = {}
        perplexity = context_length_perplexity(model, documents, lengths, prefix_token_id=adapter.prefix_token_id,
                                               n_units=words, batch_size=settings["batch_size"],
                                               per_document=document_nll)
        window = min(settings.get("indicator_tokens", DEFAULT_INDICATOR_TOKENS), max_position)
        sequences = token_windows(documents, adapter.prefix_token_id, window,
                                  settings.get("indicator_sequences", DEFAULT_INDICATOR_SEQUENCES))
        profile = attention_profile(model, sequences)  # one window at a time: maps are (H, L, L) per layer
        metrics = {spec.primary_metric: perplexity[max_position],
                   **{f"perplexity_ctx{n}": value for n, value in perplexity.items()}}
        measured = [layer["mean"] for layer in profile["indicators"]["layers"] if layer["mean"] is not None]
        for indicator in (measured[0] if measured else {}):
            metrics[indicator] = sum(row[indicator] for row in measured) / len(measured)
        log.info("%s analysis: perplexity %s over %d documents; %d layers with attention maps", run_id,
                 {n: round(v, 2) for n, v in perplexity.items()}, len(texts), len(measured))
        return {
            "task": task,
            "seed": seed,
            "lm_eval_task": name,
            "metrics": metrics,
            "primary_metric": spec.primary_metric,
            "primary": metrics[spec.primary_metric],
            "context_length_perplexity": {"lengths": lengths, "perplexity": {str(n): v for n, v in perplexity.items()},
                                          "units": "words", "words": words, "documents": len(texts)},
            "attention": profile,
            # Per-document NLL at each context length and word counts: a claim's bootstrap resamples documents.
            "per_example": per_example.scores(
                {"words": [word_count(text) for text in texts], **{f"nll_ctx{n}": v for n, v in document_nll.items()}},
                {spec.primary_metric: ["perplexity", {"nll": f"nll_ctx{max_position}", "units": "words"}],
                 **{f"perplexity_ctx{n}": ["perplexity", {"nll": f"nll_ctx{n}", "units": "words"}]
                    for n in document_nll}}),
            "eval_seconds": time.time() - started,
        }


Runner = AttentionAnalysisRunner
