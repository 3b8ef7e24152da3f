"""The hub source (DESIGN.md §5): the task datasets and the pretraining corpus from Hugging Face ``datasets``.

What every family's hub loader shares (:mod:`leanlm.data.families.glue`, ``superglue``, ``squad``, ...):
:func:`load_hub_dataset` (through the hub mirror when one is set), the held-out test split of a benchmark
that hides its test labels (:func:`heldout_splits`), and :func:`ensure_hub_reachable`, which fails at once
(not after 20+ s of retries) when ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set or huggingface.co
cannot be reached. The pretraining corpus: :func:`wikipedia_documents` and :func:`bookcorpus_documents`
take rows in the hub's schema (a ``datasets.Dataset``, or any iterable of dicts), so tests feed them local
fixtures; only :func:`load_hub_dataset` and :func:`stream_hub_corpus` touch the network.

Held-out splits: the thesis trains on the full official train split and reports on the dev set
(``data.tasks.heldout_fraction`` 0, the paper profile; DESIGN §8); a profile that wants a test score sets
a fraction (:data:`HELDOUT_FRACTION` is the usual 10%): "test" is then that slice of the train split,
chosen by hashing the seed, the task and the unit (row idx, paragraph, article), and "train" is the rest.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urlparse

from leanlm.data.sources.packaged_raw import Document
from leanlm.data.splitting import unit_interval
from leanlm.data.tasks import TaskSpec
from leanlm.data.text import clean_text
from leanlm.errors import ConfigError, DataError

log = logging.getLogger(__name__)

PARQUET_REVISION = "refs/convert/parquet"              # the hub's parquet copy of script datasets

HUB_HOST = ("huggingface.co", 443)
CONNECT_TIMEOUT_S = 3.0
HELDOUT_FRACTION = 0.1  # the usual hold-out when a profile turns one on (data.tasks.heldout_fraction)
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_reachable = False  # remembered per process once a connection succeeded

# The thesis pretrains on English Wikipedia + BookCorpus (§3.4.4). BookCorpus rows are single
# sentences of consecutive book text; ``lines_per_document`` of them make one corpus document.
HUB_CORPORA = (
    {"name": "wikipedia", "dataset": "wikimedia/wikipedia", "config": "20231101.en", "split": "train",
     "text": "text", "id": "id"},
    {"name": "bookcorpus", "dataset": "bookcorpus/bookcorpus", "config": None, "split": "train",
     "text": "text", "lines_per_document": 200},
)


def _unreachable(what: str, profile: str, reason: str) -> DataError:
    from leanlm.data.plumbing.mirror import ENV_VAR, SETTING

    return DataError(
        f"profile {profile!r} uses source 'hub' ({what}), but the Hugging Face hub is unreachable "
        f"({reason}) and no hub mirror is set; set {SETTING} in the profile (or {ENV_VAR}) to a mirror "
        f"filled with `leanlm mirror --params params/{profile}.yaml` on a machine with network, use the "
        f"packaged source (params/smoke.yaml), or run with network"
    )


def _connect_target() -> tuple[str, int]:
    # Behind an HTTPS proxy the hub is reached through the proxy: test that connection instead.
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:
        parsed = urlparse(proxy if "//" in proxy else f"http://{proxy}")
        if parsed.hostname:
            return parsed.hostname, parsed.port or 8080
    return HUB_HOST


def ensure_hub_reachable(what: str, profile: str) -> None:
    """Raise DataError at once when the hub cannot be used (offline variables, or no TCP connection
    to huggingface.co:443 within 3 s)."""
    global _reachable
    for var in _OFFLINE_VARS:
        value = os.environ.get(var, "").strip().lower()
        if value not in ("", "0", "false", "no", "off"):
            raise _unreachable(what, profile, f"{var}={os.environ[var]} is set")
    if _reachable:
        return
    host, port = _connect_target()
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise _unreachable(what, profile, f"no connection to {host}:{port} within {CONNECT_TIMEOUT_S:g} s: {exc}") from None
    _reachable = True


# --- the hub's task datasets (shared by the families' hub loaders) --------------------------


def require_splits(spec: TaskSpec, dataset: Mapping[str, Any]) -> None:
    """DataError naming the dataset unless it has the train and validation splits ``spec.hub`` names."""
    for split in (spec.hub["train"], spec.hub["validation"]):
        if split not in dataset:
            raise DataError(f"{spec.hub['dataset']}/{spec.hub['config']} has no split {split!r}; "
                            f"splits: {', '.join(dataset)}")


def check_heldout_fraction(fraction: float) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ConfigError(f"data.tasks.heldout_fraction={fraction!r} must be a number in [0, 1) "
                          f"(0: train on the full official train split, as the thesis)")
    return float(fraction)


def is_held_out(seed: int, task: str, unit: Any, fraction: float) -> bool:
    """Whether a train ``unit`` (row idx, MultiRC paragraph, SQuAD article) goes to the held-out test split."""
    return fraction > 0 and unit_interval(seed, task, "heldout", unit) < fraction


def heldout_provenance(train_split: str, fraction: float, unit: str, benchmark: str) -> dict:
    """What META.json says about train and test: the full split, or the split minus a hashed slice."""
    if fraction == 0:
        return {"train": f"{train_split} (the full official split)",
                "test": f"none: no hold-out (data.tasks.heldout_fraction 0); {benchmark} test labels are hidden"}
    return {"train": f"{train_split} minus the held-out {fraction:.0%}",
            "test": (f"held-out {fraction:.0%} of {train_split} (hash of seed, task, {unit}); "
                     f"{benchmark} test labels are hidden")}


def heldout_splits(spec: TaskSpec, train: list[tuple[Any, dict]], validation: list[dict], seed: int,
                   hidden: int, unit: str, benchmark: str, heldout_fraction: float) -> tuple[dict, dict]:
    """Benchmark rows -> (train, validation, test) splits and their provenance.

    The benchmark's test labels are hidden, so its validation split is kept as ours (where the thesis
    reports). Our test split is empty (``heldout_fraction`` 0: train is the full official train
    split) or a held-out slice of its train split: the rows whose ``unit`` (idx, or a paragraph for
    MultiRC so no passage straddles two splits) hashes, with the seed and task, below the fraction.
    """
    fraction = check_heldout_fraction(heldout_fraction)
    hub_spec = spec.hub
    splits: dict[str, list[dict]] = {"train": [], "validation": validation, "test": []}
    for key, row in train:
        splits["test" if is_held_out(seed, spec.name, key, fraction) else "train"].append(row)
    provenance = {
        "dataset": hub_spec["dataset"],
        "config": hub_spec["config"],
        **heldout_provenance(hub_spec["train"], fraction, unit, benchmark),
        "validation": hub_spec["validation"],
        "hidden_labels_dropped": hidden,
    }
    return splits, provenance


def load_hub_dataset(spec: TaskSpec, profile: str):
    """Download (or reuse the ``datasets`` cache of) the dataset/config named in ``spec.hub``: a
    ``DatasetDict`` in the hub's schema, read from the hub mirror when one is set
    (:mod:`leanlm.data.plumbing.mirror`). Fails at once, naming the dataset, when the hub is unreachable."""
    from leanlm.data.plumbing.mirror import mirrored_dataset

    mirrored = mirrored_dataset(spec.hub["dataset"], spec.hub.get("config"), profile)
    if mirrored is not None:
        return mirrored
    what = f"{spec.hub['dataset']}/{spec.hub.get('config')}"
    ensure_hub_reachable(what, profile)
    import datasets

    try:
        return datasets.load_dataset(spec.hub["dataset"], spec.hub.get("config"))
    except Exception as exc:  # datasets raises many types (HTTP, FileNotFound, DatasetNotFound)
        raise DataError(f"could not load {what} from the Hugging Face hub: {exc}") from exc


# --- pretraining corpus -------------------------------------------------------------------------


def wikipedia_documents(rows: Iterable[Mapping[str, Any]], name: str = "wikipedia") -> Iterator[Document]:
    """wikimedia/wikipedia rows (id, url, title, text) -> corpus documents, one per article."""
    for row in rows:
        yield Document(f"{name}:{row['id']}", name, clean_text(row["text"]))


def bookcorpus_documents(rows: Iterable[Mapping[str, Any]], lines_per_document: int,
                         name: str = "bookcorpus") -> Iterator[Document]:
    """bookcorpus rows (one sentence each, in book order) -> documents of ``lines_per_document``
    consecutive sentences, numbered by position (BookCorpus has no ids)."""
    lines: list[str] = []
    number = 0
    for row in rows:
        text = clean_text(row["text"])
        if text:
            lines.append(text)
        if len(lines) == lines_per_document:
            yield Document(f"{name}:{number}", name, " ".join(lines))
            lines, number = [], number + 1
    if lines:
        yield Document(f"{name}:{number}", name, " ".join(lines))


def _interleave(streams: list[Iterator[Document]]) -> Iterator[Document]:
    # Round robin, so that a max_documents cap takes from both corpora.
    active = list(streams)
    while active:
        for stream in list(active):
            try:
                yield next(stream)
            except StopIteration:
                active.remove(stream)


def _stream_rows(corpus: Mapping[str, Any], what: str):
    """A hub corpus's rows, streamed; the hub's automatic parquet copy when the main revision does not load.

    bookcorpus/bookcorpus is a script dataset, which recent ``datasets`` refuse to run ("Dataset scripts are
    no longer supported"); its parquet copy (``refs/convert/parquet``) has the same rows, as for the Penn
    Treebank (:func:`leanlm.data.families.lm.load_lm_dataset`).
    """
    import datasets

    errors = []
    for revision in (None, PARQUET_REVISION):
        try:
            return datasets.load_dataset(corpus["dataset"], corpus["config"], split=corpus["split"], streaming=True,
                                         revision=revision)
        except Exception as exc:  # see load_hub_dataset
            errors.append(f"revision {revision or 'main'}: {exc}")
            log.info("could not stream %s at revision %s: %s", what, revision or "main", exc)
    raise DataError(f"could not stream {what} from the Hugging Face hub ({'; '.join(errors)})")


def stream_hub_corpus(profile: str) -> Iterator[Document]:
    """Wikipedia + BookCorpus, streamed from the hub (or read from the hub mirror) and interleaved
    document by document."""
    from leanlm.data.plumbing.mirror import mirrored_corpus

    streams = []
    for corpus in HUB_CORPORA:
        what = f"{corpus['dataset']}" + (f"/{corpus['config']}" if corpus["config"] else "")
        rows = mirrored_corpus(corpus["dataset"], corpus["config"], corpus["split"], profile)
        if rows is None:
            ensure_hub_reachable(what, profile)
            rows = _stream_rows(corpus, what)
        if corpus["name"] == "bookcorpus":
            streams.append(bookcorpus_documents(rows, corpus["lines_per_document"], corpus["name"]))
        else:
            streams.append(wikipedia_documents(rows, corpus["name"]))
    return _interleave(streams)


def hub_manifest(tasks: Iterable[TaskSpec], tokenizer: str | None, heldout_fraction: float) -> dict:
    """raw/MANIFEST.json of a hub profile: what the later stages will read (nothing is downloaded)."""
    return {
        "source": "hub",
        "corpora": [dict(c) for c in HUB_CORPORA],
        "tasks": {spec.name: dict(spec.hub) for spec in tasks},
        "tokenizer": tokenizer,
        "heldout_fraction": heldout_fraction,
        "files": {},
    }
