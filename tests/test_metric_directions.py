"""Every metric a table or claim can name has a declared direction, in one place (issue 27, item 1).

The defect it guards against: ``perplexity_ctx@max`` resolves to ``perplexity_ctx128``, which the old
direction table did not list, so it defaulted to higher-is-better: the context-length claim's ratio was
taken the wrong way round (all 12 parts flipped) and its perplexities printed x 100.
"""

from __future__ import annotations

import pytest

from leanlm.claims.results import resolve_metric
from leanlm.claims.spec import load_claims
from leanlm.errors import ConfigError
from leanlm.evaluation.metrics import METRICS, import_metric_modules, lower_is_better
from leanlm.reporting.derived import display_scale


def test_context_length_perplexities_are_lower_is_better_and_printed_as_they_are():
    results = [{"primary_metric": "word_perplexity",
                "metrics": {"word_perplexity": 40.0, "perplexity_ctx16": 44914.0, "perplexity_ctx128": 39752.0}}]
    longest = resolve_metric(results, "perplexity_ctx@max", "wikitext")
    assert longest == "perplexity_ctx128" and resolve_metric(results, "perplexity_ctx@min", "wikitext") == "perplexity_ctx16"
    assert lower_is_better(longest) and display_scale(longest) == 1.0
    assert not lower_is_better("accuracy") and display_scale("accuracy") == 100.0


@pytest.mark.parametrize("metric", ["perplexity_ctx", "perplexity_ctx@max", "entropy", "Accuracy", "perplexity_ctx12x"])
def test_an_undeclared_metric_is_an_error_never_a_default(metric):
    with pytest.raises(ConfigError, match=rf"metric '{metric}' has no declared direction.*metrics\.py"):
        lower_is_better(metric)


def test_every_registered_and_every_task_metric_has_a_direction():
    from leanlm.data.tasks import get_task, task_names

    import_metric_modules()
    for name in METRICS.names():
        lower_is_better(name)
    for task in task_names():
        for name in get_task(task).metrics:
            lower_is_better(name)


def test_every_metric_a_claim_names_has_a_direction():
    """What params/claims.yaml can compare: each part's metric for each of its tasks (primary resolved to
    the task's primary metric, ``@max``/``@min`` to a numbered metric of that prefix)."""
    from leanlm.data.tasks import get_task

    checked = 0
    for claim in load_claims():
        for part in claim.parts:
            tasks = part.tasks if isinstance(part.tasks, tuple) else ()
            for metric in {part.metric, part.a.metric, part.b.metric} - {None}:
                for task in tasks or (None,):
                    if metric == "primary":
                        if task is None:
                            continue
                        metric_name = get_task(task).primary_metric
                    elif metric.endswith(("@max", "@min")):
                        metric_name = metric[:-4] + "512"
                    else:
                        metric_name = metric
                    lower_is_better(metric_name)
                    checked += 1
    assert checked > 50
