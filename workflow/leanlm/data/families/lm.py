"""The ``lm`` task family (WikiText-103, Penn Treebank; params/tasks/lm.yaml): rows ``{idx, text}``.

Packaged stand-ins are built from documents the pretraining corpus holds out. The corpus stage has
already assigned every document to train/validation/test (a hash of its doc_id and
``data.corpus.split_seed``, after de-duplication and any ``max_documents`` sample), so the stand-ins
read that assignment from ``data/<profile>/corpus/{validation,test}.jsonl`` rather than recomputing
it: no stand-in text can be in ``corpus/train.jsonl``, whatever the corpus settings. Only the
sources that look like the benchmark are taken (:data:`STANDIN_SOURCES`), whole documents as rows.

The decoders are fine-tuned on an ``lm`` task's train split before its test perplexity (DESIGN §8,
:mod:`leanlm.stages.lm_finetune`), so every split is a real share: the held-out documents are
ranked by a hash of ``data.tasks.seed``, the task and the doc_id; the first :data:`VALIDATION_SHARE`
(at least one) is validation, the next :data:`TEST_SHARE` (at least one) test, and the rest (at least
one) train. A small corpus may hold out fewer than three such documents; then the longest is cut at a
paragraph boundary into contiguous parts until there are three (:func:`split_into_units`), so a tiny
profile still gets every split without borrowing pretraining text.

Hub rows keep the hub's text verbatim (WikiText's `` = Heading = `` lines included), minus blank
rows; ``idx`` is the row's position in its hub split, so the stream can be rebuilt in order. All three
official splits are read (train: 1.8M rows for WikiText-103).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

from leanlm.data.families.glue_standins import BuildContext, Rows, StandInSources, _empty
from leanlm.data.sources.hub import PARQUET_REVISION
from leanlm.data.splitting import unit_interval
from leanlm.data.task_sources import TaskFamily
from leanlm.data.tasks import TaskSpec
from leanlm.errors import DataError
from leanlm.io import read_jsonl
from leanlm.registry import Registry

log = logging.getLogger(__name__)
STANDINS: Registry = Registry("packaged LM stand-in")  # task -> builder (FAMILY)

# Corpus sources each stand-in draws from (leanlm.data.sources.packaged_raw.CORPUS_SOURCES names).
STANDIN_SOURCES = {
    "wikitext103": ("wikipedia", "wiki_paragraphs"),   # Wikipedia articles, as WikiText
    "ptb": ("lee_news", "nyt_editorials"),             # newswire, as the Treebank's WSJ text
}
HELDOUT_CORPUS_SPLITS = ("validation", "test")         # never "train": that is what is pretrained on
VALIDATION_SHARE = 0.1                                 # of the held-out documents
TEST_SHARE = 0.3                                       # of the held-out documents; train: the rest


# --- packaged stand-ins -----------------------------------------------------------------------------


def corpus_dir_of(src: StandInSources) -> Path:
    """``data/<profile>/corpus``, beside the raw files the tasks stage reads."""
    return Path(src.raw_dir).parent / "corpus"


def heldout_documents(corpus_dir: Path, sources: Iterable[str]) -> list[dict]:
    """Corpus documents of ``sources`` in the corpus's validation and test splits, in corpus order."""
    wanted = set(sources)
    out = []
    for split in HELDOUT_CORPUS_SPLITS:
        path = Path(corpus_dir) / f"{split}.jsonl"
        if not path.is_file():
            raise DataError(f"{path} is missing: the lm stand-ins take only documents the pretraining corpus "
                            f"holds out, so run the corpus stage (`leanlm data corpus --params ...`) first")
        out.extend(doc for doc in read_jsonl(path) if doc["source"] in wanted and doc["text"].strip())
    return out


def split_into_units(documents: list[dict], minimum: int = 3) -> list[dict]:
    """The documents, with the longest cut in two at its middle paragraph boundary (parts
    ``<doc_id>#1``, ``#2``, in reading order) until there are ``minimum`` units or none can be cut."""
    units = [{"doc_id": d["doc_id"], "text": d["text"]} for d in documents]
    while len(units) < minimum:
        cuttable = [u for u in units if len(u["text"].strip().split("\n")) >= 2]
        if not cuttable:
            break
        longest = max(cuttable, key=lambda u: (len(u["text"]), u["doc_id"]))
        lines = longest["text"].strip().split("\n")
        half = len(lines) // 2
        at = units.index(longest)
        units[at:at + 1] = [{"doc_id": f"{longest['doc_id']}#1", "text": "\n".join(lines[:half])},
                            {"doc_id": f"{longest['doc_id']}#2", "text": "\n".join(lines[half:])}]
    return units


def deal_documents(documents: list[dict], seed: int, task: str) -> dict[str, list[dict]]:
    """The documents ranked by a hash of (seed, task, doc_id): validation the first
    :data:`VALIDATION_SHARE`, test the next :data:`TEST_SHARE`, train the rest (each at least one).
    Fewer than three documents are first cut into parts (:func:`split_into_units`)."""
    documents = split_into_units(documents)
    if len(documents) < 3:
        raise DataError(f"the packaged stand-in of {task!r} needs at least 3 held-out documents or paragraphs "
                        f"(one per split) and the corpus holds out {len(documents)}; raise "
                        f"data.corpus.validation_fraction / test_fraction or use more documents")
    ranked = sorted(documents, key=lambda d: unit_interval(seed, task, "lm", d["doc_id"]))
    n_validation = max(1, int(len(ranked) * VALIDATION_SHARE))
    n_test = max(1, min(int(len(ranked) * TEST_SHARE), len(ranked) - n_validation - 1))
    return {"validation": ranked[:n_validation], "test": ranked[n_validation:n_validation + n_test],
            "train": ranked[n_validation + n_test:]}


@STANDINS.register("wikitext103")
@STANDINS.register("ptb")
def build_lm_standin(src: StandInSources, ctx: BuildContext) -> Rows:
    """Rows ``{"text": document}`` of one lm stand-in (the tasks stage numbers them)."""
    documents = heldout_documents(corpus_dir_of(src), STANDIN_SOURCES[ctx.task])
    out = _empty()
    for split, docs in deal_documents(documents, ctx.seed, ctx.task).items():
        out[split] = [{"text": doc["text"]} for doc in docs]
    return out


# --- hub ---------------------------------------------------------------------------------------------


def map_lm_rows(spec: TaskSpec, rows: Iterable[Mapping[str, Any]]) -> tuple[list[dict], int]:
    """Hub rows -> ``{"idx", "text"}`` from the column ``spec.hub["text"]``; returns (rows, blank rows dropped)."""
    column = spec.hub["text"]
    out, blank = [], 0
    for position, row in enumerate(rows):
        if column not in row:
            raise DataError(f"{spec.hub['dataset']}/{spec.hub['config']} rows have no column {column!r} "
                            f"(params/tasks/lm.yaml, key lm.{spec.name}.hub.text); columns: {', '.join(row)}")
        text = row[column]
        if text is None or not str(text).strip():
            blank += 1
            continue
        out.append({"idx": position, "text": str(text)})
    return out, blank


def lm_task_splits(spec: TaskSpec, dataset: Mapping[str, Iterable[Mapping[str, Any]]]) -> tuple[dict, dict]:
    """train/validation/test rows of one lm task from hub splits (a ``DatasetDict`` or a dict of row lists)."""
    hub = spec.hub
    splits: dict[str, list[dict]] = {}
    blank = {}
    for ours in ("train", "validation", "test"):
        theirs = hub[ours]
        if theirs not in dataset:
            raise DataError(f"{hub['dataset']}/{hub['config']} has no split {theirs!r}; splits: {', '.join(dataset)}")
        splits[ours], blank[ours] = map_lm_rows(spec, dataset[theirs])
        if not splits[ours]:
            raise DataError(f"{hub['dataset']}/{hub['config']} split {theirs!r} has no text in column {hub['text']!r}")
    provenance = {
        "dataset": hub["dataset"],
        "config": hub["config"],
        "train": hub["train"],
        "validation": hub["validation"],
        "test": hub["test"],
        "blank_rows_dropped": blank,
    }
    return splits, provenance


def load_lm_dataset(spec: TaskSpec, profile: str) -> dict:
    """Download (or reuse the ``datasets`` cache of) the train, validation and test splits of one lm task.

    Script-based datasets (the Penn Treebank's ``ptb_text_only``) no longer load with recent
    ``datasets``; the hub's automatic parquet copy (:data:`PARQUET_REVISION`) is tried after the
    main revision fails.
    """
    from leanlm.data.sources.hub import ensure_hub_reachable
    from leanlm.data.plumbing.mirror import mirrored_dataset

    hub = spec.hub
    splits = tuple(hub[s] for s in ("train", "validation", "test"))
    mirrored = mirrored_dataset(hub["dataset"], hub["config"], profile, splits)
    if mirrored is not None:
        return {split: mirrored[split] for split in splits}
    what = f"{hub['dataset']}/{hub['config']}"
    ensure_hub_reachable(what, profile)
    import datasets

    errors = []
    for revision in (None, PARQUET_REVISION):
        try:
            return {hub[s]: datasets.load_dataset(hub["dataset"], hub["config"], split=hub[s], revision=revision)
                    for s in ("train", "validation", "test")}
        except Exception as exc:  # datasets raises many types (HTTP, FileNotFound, DatasetNotFound, scripts)
            errors.append(f"revision {revision or 'main'}: {exc}")
            log.info("could not load %s at revision %s: %s", what, revision or "main", exc)
    raise DataError(f"could not load {what} from the Hugging Face hub ({'; '.join(errors)})")


def load_lm_family(spec: TaskSpec, profile: str, seed: int, heldout_fraction: float) -> tuple[dict, dict]:
    # WikiText-103 and Penn Treebank have official test splits: nothing is held out of train.
    return lm_task_splits(spec, load_lm_dataset(spec, profile))


FAMILY = TaskFamily("lm", standins=STANDINS, hub=load_lm_family)
