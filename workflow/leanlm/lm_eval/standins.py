"""Packaged stand-ins for the ch.-4 lm-eval tasks (§4.4.1), written as lm-eval local-JSON tasks.

Each stand-in is built from real held-out text and has its thesis task's shape, output type and
metric, so every code path of the paper profile's evaluation (our adapter inside lm-eval) runs offline:

============================  ==============  ==========================================================
task                          stands in for   built from
============================  ==============  ==========================================================
leanlm_definition             arc_easy        "X is a ..." sentences: "What is X?", 4 definitions
leanlm_cloze_support          sciq            a support passage + one of its sentences with a word blanked,
                                              4 words of the passage to choose from
leanlm_sentiment              boolq           labelled texts (e.g. movie-review snippets) as a choice
                                              between their label names ("Sentiment: negative|positive")
leanlm_next_sentence_2way     copa            a sentence; its true successor vs one from another document
leanlm_sentence_completion    piqa            the first half of a sentence; its true end vs another's
leanlm_entailment             rte             premise; hypothesis = premise minus a span (True) or also with
                                              a content word replaced (False)
leanlm_next_sentence_4way     hellaswag       two sentences; the true next one vs three from other documents
leanlm_wikitext               wikitext        whole documents, rolling perplexity (word/byte ppl, bits/byte)
leanlm_lambada                lambada_openai  passages whose last word occurred earlier in them (ppl, acc)
============================  ==============  ==========================================================

Every labelled family ``labelled[name]`` becomes ``leanlm_<name>``; only ``sentiment`` has a thesis
counterpart. Each stand-in declares the ``metric_list`` of lm-eval's own config of its thesis task
(:mod:`leanlm.lm_eval.configs`; ``acc`` for a family without one). The caller passes held-out documents (the corpus's test split) and held-out labelled
texts, so no stand-in shares text with pretraining. Multiple-choice rows are ``{"query", "choices",
"label"}``; the gold position is drawn at random. Files: ``<task>.jsonl`` + ``<task>.yaml`` per task and
``MANIFEST.json``, all written atomically. The YAMLs name their data file relative to the task folder
(just ``<task>.jsonl``), never by an absolute path, so a task folder built on one machine hashes the same
as one built on another and still works after a DVC pull. lm-eval itself resolves ``data_files`` against
the working directory (``datasets.load_dataset``), so :func:`leanlm.lm_eval.adapter.run_lm_eval`
resolves them against the YAML's folder before handing the config to lm-eval's ``TaskManager``; lm-eval's
own CLI reads the folder as it is when run from inside it.
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence

import yaml

from leanlm.data.families.glue_standins import _delete_span
from leanlm.data.splitting import seeded_sample, task_rng
from leanlm.data.text import dedupe_key, is_content_word, is_prose_sentence, split_sentences
from leanlm.errors import ConfigError, DataError
from leanlm.lm_eval.configs import metric_list
from leanlm.io import load_yaml, write_json, write_jsonl, write_text

log = logging.getLogger(__name__)

THESIS_TASKS = {
    "leanlm_definition": "arc_easy",
    "leanlm_sentiment": "boolq",
    "leanlm_next_sentence_2way": "copa",
    "leanlm_sentence_completion": "piqa",
    "leanlm_cloze_support": "sciq",
    "leanlm_entailment": "rte",
    "leanlm_next_sentence_4way": "hellaswag",
    "leanlm_wikitext": "wikitext",
    "leanlm_lambada": "lambada_openai",
}
_PRONOUN_SUBJECTS = frozenset("he she it they we i you this that these those there here what who".split())
_DEFINITION = re.compile(r"^(?P<subject>(?:The |An |A )?[A-Z][\w'\-]*(?: (?:[A-Z0-9][\w'\-]*|of|de|and|the)){0,5}) "
                         r"(?P<verb>is|was|are|were) (?P<predicate>(?:a|an|the) [^.;:(),]+)")
_RELATIVE = re.compile(r" (?:which|who|whom|whose|that|where|when) ")
_LABEL_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TRIES = 20

Row = dict
Sentences = list[list[str]]  # per document, its prose sentences in order (None where not prose)


def _bare(word: str) -> str:
    return word.strip(".,;:!?\"'()[]\u201c\u201d\u2018\u2019")


def _choice_row(query: str, gold: str, distractors: list[str], rng: random.Random) -> Row:
    choices = list(distractors)
    label = rng.randrange(len(choices) + 1)
    choices.insert(label, gold)
    return {"query": query, "choices": choices, "label": label}


def _distinct(pool: Sequence, count: int, rng: random.Random, reject: Callable[[object], bool]) -> list | None:
    """``count`` distinct (by text) items of ``pool`` drawn at random, none rejected; None when too few turn up."""
    out, seen = [], set()
    for _ in range(_TRIES * count):
        if len(out) == count:
            break
        item = rng.choice(pool)
        text = item[1] if isinstance(item, tuple) else item
        if reject(item) or dedupe_key(text) in seen:
            continue
        seen.add(dedupe_key(text))
        out.append(text)
    return out if len(out) == count else None


class _Prose:
    """The held-out documents as sentences; what every text-built stand-in draws from."""

    def __init__(self, documents: Iterable[str]):
        self.documents = [d for d in documents if d and d.strip()]
        self.sentences: Sentences = [
            [s if is_prose_sentence(s, 5, 40) else None for s in split_sentences(d)] for d in self.documents]
        # (document index, sentence): the pool of distractor sentences.
        self.pool = [(d, s) for d, sents in enumerate(self.sentences) for s in sents if s]

    def runs(self, length: int) -> Iterable[tuple[int, list[str]]]:
        """Every run of ``length`` consecutive prose sentences, with its document index."""
        for d, sents in enumerate(self.sentences):
            for i in range(len(sents) - length + 1):
                run = sents[i : i + length]
                if all(run):
                    yield d, run  # type: ignore[misc]


# ------------------------------------------------------------------ multiple-choice builders
def build_next_sentence(prose: _Prose, rng: random.Random, n_choices: int, n_context: int) -> list[Row]:
    """``n_context`` sentences, then their true successor among ``n_choices`` (others: other documents)."""
    if len(prose.pool) < n_choices:
        return []
    rows = []
    for d, run in prose.runs(n_context + 1):
        gold = run[-1]
        distractors = _distinct(prose.pool, n_choices - 1, rng,
                                lambda item: item[0] == d or dedupe_key(item[1]) == dedupe_key(gold))
        if distractors is not None:
            rows.append(_choice_row(" ".join(run[:-1]), gold, distractors, rng))
    return rows


def build_sentence_completion(prose: _Prose, rng: random.Random) -> list[Row]:
    """The first half of a sentence; its true second half vs the second half of another document's sentence."""
    ends = [(d, " ".join(s.split()[len(s.split()) // 2 :])) for d, s in prose.pool if len(s.split()) >= 8]
    rows = []
    for d, sentence in prose.pool:
        words = sentence.split()
        if len(words) < 8 or len(ends) < 2:
            continue
        head, gold = " ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])
        other = _distinct(ends, 1, rng, lambda item: item[0] == d or dedupe_key(item[1]) == dedupe_key(gold))
        if other is not None:
            rows.append(_choice_row(head, gold, other, rng))
    return rows


def build_definition(prose: _Prose, rng: random.Random, n_choices: int = 4) -> list[Row]:
    """"X is a ..." sentences: "Question: What is X?" with X's definition among other subjects' ones."""
    found = []
    for d, sentence in prose.pool:
        match = _DEFINITION.match(sentence)
        if not match or match["subject"].lower() in _PRONOUN_SUBJECTS:
            continue
        # The definition up to its first relative clause, at most 12 words: short answers, as in ARC.
        predicate = " ".join(_RELATIVE.split(match["predicate"], maxsplit=1)[0].split()[:12])
        if len(predicate.split()) >= 3:
            found.append((match["subject"], match["verb"], predicate))
    pool = [(subject.lower(), predicate) for subject, _, predicate in found]
    rows = []
    for subject, verb, predicate in found:
        distractors = _distinct(pool, n_choices - 1, rng, lambda item: item[0] == subject.lower()
                                or dedupe_key(item[1]) == dedupe_key(predicate))
        if distractors is not None:
            name = subject[0].lower() + subject[1:] if subject.split()[0] in ("The", "A", "An") else subject
            rows.append(_choice_row(f"Question: What {verb} {name}?\nAnswer:", predicate, distractors, rng))
    return rows


def build_cloze_support(prose: _Prose, rng: random.Random, n_choices: int = 4) -> list[Row]:
    """A 3-sentence passage as support; one of its sentences, with a content word that the rest of the
    passage also uses blanked, as the question; the answer among other content words of the passage."""
    rows = []
    for _, run in prose.runs(3):
        q = rng.randrange(3)
        support = " ".join(s for i, s in enumerate(run) if i != q)
        support_words = {_bare(w) for w in support.split()}
        question_words = run[q].split()
        bare = [_bare(w) for w in question_words]
        # A word the question uses once (so blanking hides it) and the rest of the passage also uses.
        blankable = [i for i, w in enumerate(bare) if is_content_word(w) and w in support_words and bare.count(w) == 1]
        others = sorted({w for w in support_words if is_content_word(w)} - {_bare(w) for w in question_words})
        if not blankable or len(others) < n_choices - 1:
            continue
        i = rng.choice(blankable)
        answer = _bare(question_words[i])
        blanked = question_words[:i] + [question_words[i].replace(answer, "___", 1)] + question_words[i + 1 :]
        query = f"{support}\nQuestion: {' '.join(blanked)}\nAnswer:"
        rows.append(_choice_row(query, answer, rng.sample(others, n_choices - 1), rng))
    return rows


def build_entailment(prose: _Prose, rng: random.Random) -> list[Row]:
    """RTE's prompt and label order (0 = entailment = "True"): the hypothesis is the premise minus a
    short span, and for non-entailment also one content word replaced by another of the prose."""
    vocabulary = sorted({_bare(w) for _, s in prose.pool for w in s.split() if is_content_word(_bare(w))})
    rows = []
    for _, premise in prose.pool:
        words = premise.split()
        span = _delete_span(words, rng) if 8 <= len(words) <= 35 else None
        if span is None or len(vocabulary) < 2:
            continue
        kept = words[: span[0]] + words[span[1] :]
        entailed = rng.random() < 0.5
        if not entailed:
            replaceable = [i for i, w in enumerate(kept) if is_content_word(w)]
            if not replaceable:
                continue
            i = rng.choice(replaceable)
            replacement = rng.choice(vocabulary)
            if replacement == kept[i]:
                continue
            kept[i] = replacement
        hypothesis = " ".join(kept)
        rows.append({"query": f"{premise}\nQuestion: {hypothesis} True or False?\nAnswer:",
                     "choices": ["True", "False"], "label": 0 if entailed else 1})
    return rows


def build_labelled(examples: Sequence[tuple[str, str]], name: str) -> list[Row]:
    """Classification as choice: "<text>\\n<Name>:" followed by one of the label names (sorted)."""
    labels = sorted({label for _, label in examples})
    if len(labels) < 2:
        raise DataError(f"labelled[{name!r}] has {len(labels)} distinct label(s); a choice needs at least two")
    return [{"query": f"{text}\n{name.replace('_', ' ').capitalize()}:", "choices": labels, "label": labels.index(label)}
            for text, label in examples if text.strip()]


# ------------------------------------------------------------------ language-modelling builders
def build_pages(documents: Sequence[str], min_words: int = 100, max_words: int | None = None) -> list[Row]:
    """Whole documents of at least ``min_words`` words (cut at a paragraph end after ``max_words``)."""
    rows = []
    for doc in documents:
        if len(doc.split()) < min_words:
            continue
        if max_words is not None:
            kept, count = [], 0
            for paragraph in doc.split("\n"):
                kept.append(paragraph)
                count += len(paragraph.split())
                if count >= max_words:
                    break
            doc = "\n".join(kept)
        rows.append({"page": doc})
    return rows


def build_last_word(prose: _Prose, min_words: int = 40, max_words: int = 150) -> list[Row]:
    """LAMBADA-like passages: consecutive sentences of one document whose final word (punctuation
    dropped) is a content word that occurred earlier in the passage, so context predicts it."""
    rows = []
    for sents in prose.sentences:
        start = 0
        while start < len(sents):
            passage: list[str] = []
            i = start
            while i < len(sents) and sents[i] and sum(len(s.split()) for s in passage) < min_words:
                passage.append(sents[i])
                i += 1
            start = max(i, start + 1)
            words = " ".join(passage).split()
            if not min_words <= len(words) <= max_words:
                continue
            target = _bare(words[-1])
            earlier = {_bare(w).lower() for w in words[:-1]}
            if is_content_word(target) and target.lower() in earlier:
                rows.append({"text": " ".join(words[:-1] + [target])})
    return rows


# ------------------------------------------------------------------ writing lm-eval tasks
def _task_config(name: str, data_file: Path, output_type: str) -> dict:
    # A stand-in reports exactly the metrics of the task it stands in for, as lm-eval's own config of
    # that task lists them (BoolQ, COPA and RTE: acc only), so both sources fill the same table cells.
    # A labelled family with no thesis counterpart is a classification-as-choice task: accuracy.
    metrics = metric_list(THESIS_TASKS[name]) if name in THESIS_TASKS else [{"metric": "acc"}]
    config = {"task": name, "dataset_path": "json",
              "dataset_kwargs": {"data_files": {"test": data_file.name}},  # relative to the YAML's folder
              "output_type": output_type, "test_split": "test"}
    if output_type == "multiple_choice":
        config.update(doc_to_text="{{query}}", doc_to_choice="choices", doc_to_target="label", metric_list=metrics)
    elif output_type == "loglikelihood_rolling":
        config.update(doc_to_text="", doc_to_target="{{page}}", metric_list=metrics)
    else:  # LAMBADA's own templates: everything but the last word, then " " + the last word
        config.update(doc_to_text="{{text.split(' ')[:-1]|join(' ')}}",
                      doc_to_target="{{' '+text.split(' ')[-1]}}", metric_list=metrics)
    config["metadata"] = {"version": 1.0, "thesis_task": THESIS_TASKS.get(name)}
    return config


# The output type of each stand-in, fixed by what its builder writes; a labelled family
# (``leanlm_<family>``) is multiple choice. Read here, never from a task YAML (see standin_config).
OUTPUT_TYPES = {
    "leanlm_definition": "multiple_choice", "leanlm_cloze_support": "multiple_choice",
    "leanlm_next_sentence_2way": "multiple_choice", "leanlm_sentence_completion": "multiple_choice",
    "leanlm_entailment": "multiple_choice", "leanlm_next_sentence_4way": "multiple_choice",
    "leanlm_wikitext": "loglikelihood_rolling", "leanlm_lambada": "loglikelihood",
}
_STANDIN_NAME = re.compile(r"^leanlm_[a-z][a-z0-9_]*$")


def standin_output_type(name: str) -> str:
    """The output type stand-in ``name`` is built with (ConfigError for a name no builder writes)."""
    if not _STANDIN_NAME.match(name):
        raise ConfigError(f"{name!r} is not a leanlm stand-in task name (leanlm_<lowercase letters, digits, _>)")
    return OUTPUT_TYPES.get(name, "multiple_choice")


def standin_config(folder: Path, name: str) -> dict:
    """The config lm-eval runs for stand-in ``name`` of the task folder ``folder``: this module's own
    config of that task (:func:`_task_config`), its data file resolved beside the YAML.

    The folder is data: the tasks stage writes it, and ``dvc pull`` may bring it from a shared remote.
    lm-eval would run what a task YAML says: a ``!function`` tag or an ``include`` of a YAML beside it
    imports Python from the folder, and its templates are Jinja rendered outside a sandbox. So the YAML
    decides nothing: it must be exactly the config this module writes for ``name`` (only the data file may
    be an older build's absolute path to ``<name>.jsonl``), and what lm-eval gets is regenerated here. A YAML
    that differs is refused, naming the file and the keys, never run.
    """
    path = Path(folder) / f"{name}.yaml"
    output_type = standin_output_type(name)
    if not path.is_file():
        raise DataError(f"lm-eval stand-in {name!r}: {path} is missing; run the data stage to write the stand-ins")

    def refuse(detail: str) -> DataError:
        return DataError(f"{path} is not the task definition leanlm writes for {name!r} ({detail}); leanlm evaluates "
                         f"only the stand-ins it generates (a task YAML can make lm-eval import code or render "
                         f"templates). Delete {path.parent} and rerun the data stage (`snakemake data` or "
                         f"`dvc repro tasks@<profile>`)")

    try:
        recorded = load_yaml(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:  # a tag (!function, !!python) is refused by safe loading
        raise refuse(f"{type(err).__name__}: {str(err).splitlines()[0]}") from None
    if not isinstance(recorded, dict):
        raise refuse(f"it holds a {type(recorded).__name__}, not a mapping")
    data_name = f"{name}.jsonl"
    expected = _task_config(name, Path(data_name), output_type)
    recorded_file = ((recorded.get("dataset_kwargs") or {}).get("data_files") or {}).get("test") \
        if isinstance(recorded.get("dataset_kwargs"), dict) else None
    if isinstance(recorded_file, str) and Path(recorded_file).name == data_name:  # an older build's absolute path
        recorded = {**recorded, "dataset_kwargs": {**recorded["dataset_kwargs"], "data_files": {"test": data_name}}}
    differing = sorted(key for key in set(recorded) | set(expected) if recorded.get(key) != expected.get(key))
    if differing:
        raise refuse(f"differs in {', '.join(map(str, differing))}")
    data_file = (path.parent / data_name).absolute()
    return {**expected, "dataset_kwargs": {"data_files": {"test": str(data_file)}}}


def _write_task(out_dir: Path, name: str, rows: list[Row], output_type: str) -> Path:
    data_file = out_dir / f"{name}.jsonl"
    write_jsonl(data_file, rows)
    yaml_path = out_dir / f"{name}.yaml"
    write_text(yaml_path, yaml.safe_dump(_task_config(name, data_file, output_type), sort_keys=False, allow_unicode=True))
    return yaml_path


def build_lm_eval_tasks(
    documents: list[str],
    labelled: dict[str, list[tuple[str, str]]] | None,
    out_dir: Path,
    seed: int,
    max_examples: int,
    *,
    max_page_words: int | None = None,
) -> dict[str, Path]:
    """Write every stand-in that the inputs allow into ``out_dir``; return task name -> YAML path.

    ``documents``: held-out corpus texts; ``labelled``: held-out ``(text, label name)`` pairs per family
    (``{"sentiment": [...]}``). Each task keeps a seeded sample of at most ``max_examples`` rows; a task
    the inputs give no rows for is left out and listed under ``skipped`` in MANIFEST.json.
    """
    if max_examples < 1:
        raise ConfigError(f"max_examples={max_examples} must be at least 1")
    out_dir = Path(out_dir)
    prose = _Prose(documents)
    builders: dict[str, Callable[[random.Random], list[Row]]] = {
        "leanlm_definition": lambda rng: build_definition(prose, rng),
        "leanlm_cloze_support": lambda rng: build_cloze_support(prose, rng),
        "leanlm_next_sentence_2way": lambda rng: build_next_sentence(prose, rng, 2, 1),
        "leanlm_sentence_completion": lambda rng: build_sentence_completion(prose, rng),
        "leanlm_entailment": lambda rng: build_entailment(prose, rng),
        "leanlm_next_sentence_4way": lambda rng: build_next_sentence(prose, rng, 4, 2),
        "leanlm_wikitext": lambda rng: build_pages(prose.documents, max_words=max_page_words),
        "leanlm_lambada": lambda rng: build_last_word(prose),
    }
    for family, examples in (labelled or {}).items():
        if not _LABEL_NAME.match(family):
            raise ConfigError(f"labelled family {family!r}: use a lowercase name of letters, digits and _")
        builders[f"leanlm_{family}"] = lambda rng, e=examples, f=family: build_labelled(e, f)
    written, manifest, skipped = {}, {}, {}
    for name, build in builders.items():
        output_type = standin_output_type(name)
        rng = task_rng(seed, name)
        rows = seeded_sample(build(rng), max_examples, rng)
        if not rows:
            skipped[name] = "the inputs give no example of this task"
            log.warning("lm-eval stand-in %s: no examples from %d documents; left out", name, len(prose.documents))
            continue
        written[name] = _write_task(out_dir, name, rows, output_type)
        manifest[name] = {"thesis_task": THESIS_TASKS.get(name), "output_type": output_type, "examples": len(rows),
                          "yaml": written[name].name, "data": f"{name}.jsonl"}
    write_json(out_dir / "MANIFEST.json", {"seed": seed, "max_examples": max_examples, "tasks": manifest,
                                           "skipped": skipped})
    return written
