"""Every claim of params/claims.yaml, run through the claims stage on synthetic results at the thesis's own
numbers, comes out supported; with A and B swapped, each one-sided part comes out contradicted (issue 27,
item 1: a direction taken the wrong way round, as perplexity_ctx<n> once was, fails here).

Where "the claim holds" comes from: each part's ``thesis: [A, B]`` (printed units: accuracy in %,
perplexity as is; leanlm.reporting.derived.display_scale converts). For a claim, a fresh results tree is
written (tests/claims_world.py, shaped as leanlm's jobs write theirs) in which each run of each part scores
the thesis's number on the part's benchmark (a GLUE average: every task at that number), and the runs its
preconditions read score values inside the precondition's region (:data:`REGIME`). Where the thesis prints
no number for a side, it is derived from the part's test: :func:`derived`. Baseline rows (Rnd. Guess,
Majority) are computed from the synthetic documents, as the evaluation computes them.

Claims the thesis's own numbers cannot support at any evaluation size the test can afford are listed in
:data:`NOT_SUPPORTED_ON_THE_THESIS_NUMBERS` with the reason, and their actual verdict is asserted.

The synthetic models are nested (a better model is right wherever a worse one is: tests/claims_world.py),
the tightest pairing the examples allow. So ch4_approximate_best_uniform's NLU gaps (50.2 vs 50.0) are
supported here, where the two models differ on 0.2% of the examples; with the independent errors behind
the thesis's own standard errors (larger than the gap, issue 27) they would not be.
"""

from __future__ import annotations

import math
import shutil

import pytest
import yaml

from leanlm.claims.spec import load_claims

PROFILE = "smoke"  # runs every experiment the claims name, with two fine-tuning seeds
DRAWS = 500
FILLER = {True: 100.0, False: 50.0}  # a task no part reads: perplexity 100 / a score of 50%

# Values of runs a precondition reads that no part of the claim fixes, inside the precondition's region:
# the thesis's numbers where its reason quotes them (Table 4.1: Standard 38.1 vs uniform MLP 993.5 on
# WikiText, Standard's NLU average 51.9; Table 2.1: BERT-MLM's GLUE average 79.5), else a value clearly
# inside (LAMBADA accuracy above 0: 10%).
REGIME = {
    ("ch4_uniform-standard", "lm_eval", "lm_eval_wikitext"): 38.1,
    ("ch4_uniform-mlp", "lm_eval", "lm_eval_wikitext"): 993.5,
    ("ch4_uniform-standard", "lm_eval", "nlu"): 51.9,
    ("ch4_uniform-standard", "lm_eval", "lm_eval_lambada_openai"): 10.0,
    ("ch2_hashformers-bert_mlm", "glue", "average"): 79.5,
    # ch. 3's reference, MHA (Tables 3.1 and 3.2: the encoder's GLUE and SUPERGLUE averages, the decoder's GLUE)
    ("ch3_encoder-mha", "glue", "average"): 81.9,
    ("ch3_encoder-mha", "superglue", "average"): 70.5,
    ("ch3_decoder-mha", "glue", "average"): 77.5,
}


def derived(known: float, lower: bool, part, a_side: bool) -> float:
    """A side the thesis prints no number for, from the other side's ``known`` value and the part's test:
    twice the region's boundary away for a ratio, 10 points beyond it for a difference (always on the
    side of the region the claim allows)."""
    low = part.region[0]
    if part.effect == "ratio":  # effect = A/B (B/A where lower is better) > low
        factor = 2 * max(low, 1.0)
        better = known / factor if lower else known * factor
        worse = known * factor if lower else known / factor
    else:
        step = max(low, 0.0) + 10.0
        better, worse = (known - step, known + step) if lower else (known + step, known - step)
    return better if a_side else worse


def _tasks(part, config, tasks):
    if tasks is not None:
        return list(tasks)
    return list(config["finetune"][part.family]["tasks"]) if part.tasks in ("average", "each") else list(part.tasks)


class Plan:
    """What each (run, family, task, metric) scores in one claim's world."""

    def __init__(self, config):
        self.config, self.values, self.attention, self.timing = config, {}, {}, {}

    def set(self, run, family, tasks, metric, value, overwrite=True):
        for task in tasks:
            key = (run, family, task, metric)
            if overwrite or key not in self.values:
                self.values[key] = value

    def get(self, run, family, task, metric):
        return self.values.get((run, family, task, metric))

    def metric_of(self, task, metric):
        from leanlm.data.tasks import get_task

        if metric == "primary":
            return get_task(task).primary_metric
        if metric.endswith(("@max", "@min")):
            lengths = self.config["finetune"]["analysis"]["context_lengths"]
            return f"{metric[:-4]}{max(lengths) if metric.endswith('@max') else min(lengths)}"
        return metric

    def side(self, side, part, tasks, value):
        """Place ``value`` (printed units) on one side of a part."""
        family = side.family or part.family
        if side.kind == "run":
            for task in tasks:
                self.set(side.runs[0], family, [task], self.metric_of(task, side.metric or part.metric), value)
        elif side.kind == "timing":
            self.timing[side.runs[0]] = value
        elif side.kind == "prr":  # PRR = 100 x run / MHA: MHA at 80 (any score), the run at its share
            run, mha = side.runs
            for task in tasks:
                metric = self.metric_of(task, part.metric)
                self.set(mha, family, [task], metric, 80.0, overwrite=False)
                self.set(run, family, [task], metric, self.get(mha, family, task, metric) * value / 100)
        elif side.kind == "peop":  # PEoP = (s/s_sha - 1)/(p/p_sha - 1): scores from CH3_SCORES, p solved
            run, sha = side.runs
            for task in tasks:
                metric = self.metric_of(task, part.metric)
                for r in (run, sha):
                    self.set(r, family, [task], metric, CH3_SCORES[(r, family)], overwrite=False)
            growth = (CH3_SCORES[(run, family)] / CH3_SCORES[(sha, family)] - 1) / value
            self.attention[(sha, family)] = 1_000_000
            self.attention[(run, family)] = int(round(1_000_000 * (1 + growth)))
        # baseline and constant sides: computed from the documents / fixed in the claim


# Ch. 3's scores the PEoP parts rest on (Tables 3.1-3.3 as params/claims.yaml quotes them elsewhere:
# ch3_mha_best_absolute, ch3_mhe_above_sha_everywhere); WMT-14 BLEU of MHA, MQA, SKV and EL-ATT is quoted
# nowhere in the file: 24.0 (any score above SHA's 22.5 gives a PEoP of the thesis's sign).
CH3_SCORES = {
    **{(f"ch3_encoder-{r}", "glue"): v for r, v in
       dict(mha=81.9, sha=79.2, el_att=80.3, mqa=81.3, skv=81.4, mhe_add=80.4, mhe_mul=80.6).items()},
    **{(f"ch3_decoder-{r}", "glue"): v for r, v in
       dict(mha=77.5, sha=75.3, el_att=76.6, mqa=76.9, skv=77.1, mhe_add=75.8, mhe_mul=76.7).items()},
    **{(f"ch3_encdec-{r}", "translation"): v for r, v in
       dict(mha=24.0, sha=22.5, el_att=24.0, mqa=24.0, skv=24.0, mhe_add=23.0, mhe_mul=23.6).items()},
}


def _lower(plan, task, metric) -> bool:
    from leanlm.evaluation.metrics import lower_is_better

    return lower_is_better(plan.metric_of(task, metric))


def _regime(run, family, task):
    nlu = task.startswith("lm_eval_") and task not in ("lm_eval_wikitext", "lm_eval_lambada_openai")
    return REGIME.get((run, family, task), REGIME.get((run, family, "nlu" if nlu else "average")))


def plan_claim(claim, config, swap: bool = False) -> Plan:
    """Each part's sides at the thesis's numbers (A and B exchanged when ``swap``), then the runs its
    preconditions read, where no part fixed them."""
    plan = Plan(config)
    expanded = []
    for part in claim.parts:
        for tasks in ([[t] for t in _tasks(part, config, None)] if part.tasks == "each" else [None]):
            expanded.append((part, _tasks(part, config, tasks) if part.family != "pretrain" else []))
    for part, tasks in expanded:
        a, b = part.thesis or (None, None)
        lower = bool(tasks) and _lower(plan, tasks[0], part.a.metric or part.metric)
        if a is None and b is None:  # neither printed: B at a plain value, A derived from it
            b = FILLER[lower]
        if a is None:
            a = derived(b, lower, part, a_side=True)
        if b is None:
            b = derived(a, lower, part, a_side=False)
        if swap:
            a, b = b, a
        plan.side(part.a, part, tasks, a)
        plan.side(part.b, part, tasks, b)
    for part, tasks in expanded:
        for cond in part.conditions:
            own = cond.part
            if cond.kind != "compare" or own.a.kind != "run":
                continue
            own_tasks = tasks if own.tasks == part.tasks else _tasks(own, config, None)
            for task in own_tasks:
                metric = plan.metric_of(task, own.metric)
                lower = _lower(plan, task, metric)
                ra, fam = own.a.runs[0], own.a.family or own.family
                va = plan.get(ra, fam, task, metric)
                if own.b.kind != "run":  # a baseline or a constant: the run at its regime value
                    if va is None:
                        plan.set(ra, fam, [task], metric, _regime(ra, fam, task))
                    continue
                rb = own.b.runs[0]
                vb = plan.get(rb, fam, task, metric)
                if va is None and vb is None:
                    known = plan.get(part.a.runs[0], part.family, task, metric) if part.a.runs else None
                    vb = _regime(rb, fam, task) or derived(known if known is not None else FILLER[lower], lower, own,
                                                           a_side=False)
                    plan.set(rb, fam, [task], metric, vb)
                if va is None:
                    plan.set(ra, fam, [task], metric, _regime(ra, fam, task) or derived(vb, lower, own, a_side=True))
                elif vb is None:
                    plan.set(rb, fam, [task], metric, derived(va, lower, own, a_side=False))
    return plan


def write_world(root, config, plan: Plan) -> None:
    from claims_world import World
    from leanlm.evaluation.metrics import lower_is_better

    world = World(root, config)
    shutil.rmtree(root / "results", ignore_errors=True)
    by_record = {}
    for (run, family, task, metric), value in plan.values.items():
        by_record.setdefault((run, family), {})[(task, metric)] = value
    lengths = config["finetune"]["analysis"]["context_lengths"]

    def value_of(fixed):
        def value(task, metric):
            if (task, metric) in fixed:
                return fixed[(task, metric)]
            if metric.startswith("perplexity_ctx"):  # between the shortest and longest context: geometric
                lo, hi = fixed.get((task, f"perplexity_ctx{min(lengths)}")), fixed.get((task, f"perplexity_ctx{max(lengths)}"))
                if lo is not None and hi is not None:
                    w = math.log(int(metric[len("perplexity_ctx"):]) / min(lengths)) / math.log(max(lengths) / min(lengths))
                    return math.exp((1 - w) * math.log(lo) + w * math.log(hi))
            same_task = [v for (t, m), v in fixed.items() if t == task and lower_is_better(m) == lower_is_better(metric)]
            return same_task[0] if same_task else FILLER[lower_is_better(metric)]
        return value

    for (run, family), fixed in by_record.items():
        world.family(run, family, value_of(fixed), attention=plan.attention.get((run, family), 100))
    if plan.timing:
        world.speed(plan.timing)
    if any(family == "lm_eval" for _, family in by_record):
        world.collect_baselines()


def evaluate(root, config, claim_id):
    from leanlm.claims.report import evaluate_all

    doc = yaml.safe_load((root / "params" / "claims.yaml").read_text())
    doc["claims"] = [c for c in doc["claims"] if c["id"] == claim_id]
    path = root / "params" / "one_claim.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    (result,) = evaluate_all(config, draws=DRAWS, claims_file=path)
    return result


# Claims whose thesis numbers cannot be supported by the stage at any size this test affords, with why;
# the verdict they get is asserted (never skipped).
NOT_SUPPORTED_ON_THE_THESIS_NUMBERS: dict[str, tuple[str, str]] = {
    "ch2_lsh_proj_near_bert_mlm": (
        "inconclusive", "the thesis's gap, 79.1 vs 79.5 (-0.4), lies 0.1 GLUE points inside the allowed (-0.5, 0.5): "
        "an interval that narrow needs far more dev examples than GLUE's smaller tasks have (here 2,000 per task, "
        "models agreeing on every example but the gap: [-0.50, -0.30])"),
    "ch4_hybrids_match_standard": (
        "inconclusive", "hybrid MLP's NLU gap, 48.7 vs 51.9 (-3.2), lies 0.3 points inside the allowed 3.5 (the "
        "margin was set just above the thesis's widest gap): its simultaneous interval over 12 parts, +-0.4 with "
        "2,000 examples per task, reaches past -3.5; every other part is supported"),
}

CLAIMS = [c.id for c in load_claims()]


SWAPPABLE = ("run", "prr", "peop", "timing")  # sides the test writes (a baseline row is the documents')


@pytest.mark.slow  # every claim twice through the stage: about 8 minutes on 2 cores
@pytest.mark.parametrize("claim_id", CLAIMS)
def test_every_claim_is_supported_at_the_thesis_numbers_and_a_swap_contradicts_it(scratch_root, claim_id):
    from leanlm.config import load_config

    config = load_config(scratch_root / "params" / f"{PROFILE}.yaml")
    claim = next(c for c in load_claims(scratch_root / "params" / "claims.yaml") if c.id == claim_id)
    write_world(scratch_root, config, plan_claim(claim, config))
    result = evaluate(scratch_root, config, claim_id)
    detail = "\n".join(f"  {p.label}: {p.verdict} {p.interval} {p.reason}" for p in result.parts)
    expected, _ = NOT_SUPPORTED_ON_THE_THESIS_NUMBERS.get(claim_id, ("supported", ""))
    assert result.verdict == expected, f"{claim_id}: {result.verdict}\n{detail}"

    # The mirror: A and B exchanged, each one-sided part the thesis's numbers supported is contradicted (a
    # direction taken the wrong way round supports both, or contradicts both). A part may instead become
    # untestable where the exchange moved a run its precondition reads out of the regime (e.g. uniform MLP
    # at Approximate's perplexity): then its precondition says so.
    write_world(scratch_root, config, plan_claim(claim, config, swap=True))
    mirrored = evaluate(scratch_root, config, claim_id)
    checked = 0
    for straight, swapped in zip(result.parts, mirrored.parts):
        part = straight.part
        if straight.verdict != "supported" or part.test not in ("better", "worse") or \
                {part.a.kind, part.b.kind} - set(SWAPPABLE):
            continue
        if swapped.verdict == "untestable":
            assert "Precondition" in swapped.reason, f"{claim_id}: {swapped.label}: {swapped.reason}"
            continue
        assert swapped.verdict == "contradicted", f"{claim_id}: {swapped.label} swapped: {swapped.verdict} {swapped.interval}"
        checked += 1
    one_sided = [p for p in claim.parts if p.test in ("better", "worse") and not {p.a.kind, p.b.kind} - set(SWAPPABLE)]
    assert checked or not one_sided or expected != "supported", f"{claim_id}: no part's mirror was judged"
