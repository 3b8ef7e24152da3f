"""Named pretraining data: a profile's ``data.corpora`` and ``data.tokenizers`` (ch. 4: SlimPajama, Pythia BPE,
and FineWeb's sample-10BT for FixedSeqQK's fixed text).

Chapter 4 pretrains its Qwen decoders "on the SlimPajama dataset" with "the 50K English-centric BPE
vocabulary of Pythia" (§4.4.2), while chapters 2 and 3 pretrain on the profile's own corpus with its own
tokenizer (Wikipedia + BookCorpus and BERT's WordPiece in the paper profile). So an experiment names the
data it pretrains on (``pretrain_data: {corpus: slimpajama, tokenizer: pythia}`` in
params/experiments/ch4.yaml) and a profile may define those names; one that does not (smoke, offline)
pretrains those runs on its own corpus and tokenizer. FixedSeqQK's fixed text is "the first 2048 tokens
from FineWeb-10BT" (§4.3.4), a corpus the model does not pretrain on: ``pretrain_data.fixed_text: fineweb``
names it, and the paper profile's ``data.corpora.fineweb`` is a few thousand documents of FineWeb's
sample-10BT, enough held-out text for it (:mod:`leanlm.routes.fixed_text`). :func:`leanlm.runs.runs`
resolves the names (``Run.pretrain_corpus``/``pretrain_tokenizer``, "" for the profile's own;
``Run.fixed_text_corpus`` only for runs whose model reads a fixed text, "" for the pretraining corpus) and
:func:`run_data` turns them into directories. Snakemake's pretrain job of a run depends on exactly the
corpus folders it reads (the FixedSeqQK runs on ``corpora/fineweb`` too) and takes their settings as params.

Two DVC stages per profile that names data (dvc.yaml's ``named_data_profiles``), each written atomically
(a hidden sibling folder replaces the old one on success)::

    corpora@<profile>     data/<profile>/corpora/<name>/{train,validation,test}.jsonl, STATS.json, DIGESTS.json
                          (+ corpora/MANIFEST.json: the settings of every corpus)
    tokenizers@<profile>  data/<profile>/tokenizers/<name>/{tokenizer.json,META.json} (+ tokenizers/MANIFEST.json)

run as ``leanlm data {corpora,tokenizers} --params params/<profile>.yaml`` (DVC's cmd).

A corpus is streamed from the hub (``datasets`` streaming: nothing but the documents kept is downloaded)
and stops after ``max_documents``; rows in the hub's schema (SlimPajama: ``text``,
``meta.redpajama_set_name``; FineWeb: ``text``, ``dump``) become documents in :func:`hub_documents`, which
tests feed local fixtures, and the corpus files have the shape of the profile corpus (:mod:`leanlm.data.corpus`: hash
splits, deduplication, STATS.json with counts by source). Text is kept verbatim (no
:func:`~leanlm.data.text.clean_text`): SlimPajama is already cleaned, and a byte-level BPE reads the
whitespace that clean_text would collapse (code indentation, LaTeX, lists). DIGESTS.json records each
split's SHA-256 so that pretraining jobs find their cached token stream without hashing tens of GB again
(:func:`leanlm.training.token_cache.split_digest`). Both loaders fail at once with a clear message when
the hub cannot be reached (:func:`leanlm.data.sources.hub.ensure_hub_reachable`).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from leanlm import paths
from leanlm.data.sources.packaged_raw import Document
from leanlm.errors import ConfigError, DataError
from leanlm.io import sha256_file, write_json
from leanlm.scratch import staged_dir

log = logging.getLogger(__name__)

NAMED_KINDS = ("corpora", "tokenizers")  # profile keys under data, stage names, folders under data/<profile>/
DIGESTS_FILE = "DIGESTS.json"
DVC_PROFILES_VAR = "named_data_profiles"  # dvc.yaml's list of the profiles these stages run for
# The modules each stage runs (DVC deps in dvc.yaml and Snakemake's code version: keep them in step).
STAGE_CODE = {
    "corpora": ("data/pretrain_data", "data/sources/hub", "data/corpus", "data/splitting", "data/text",
                "data/sources/packaged_raw", "data/plumbing/stages"),
    "tokenizers": ("data/pretrain_data", "data/sources/hub", "data/tokenizer", "data/plumbing/stages"),
}


def named(config: dict, kind: str) -> dict:
    """``{name: settings}`` the profile defines under ``data.<kind>`` (``{}`` when it defines none)."""
    return config["data"].get(kind) or {}


def corpus_dir(profile: str, name: str) -> Path:
    return paths.data_dir(profile) / "corpora" / name


def tokenizer_dir(profile: str, name: str) -> Path:
    return paths.data_dir(profile) / "tokenizers" / name


def embedding_rows(vocab_size: int, multiple: int = 1) -> int:
    """The vocabulary size rounded up to a multiple of ``multiple`` (GPT-NeoX pads its embedding to a
    multiple of 128: Pythia's 50,277 tokens make 50,304 rows, the count Table 4.10 assumes)."""
    return int(math.ceil(vocab_size / multiple) * multiple)


# ------------------------------------------------------------------------------------ a run's data
@dataclass(frozen=True)
class RunData:
    """Where a run's pretraining corpus, tokenizer and FixedSeqQK text live, and how many embedding rows
    it gets."""

    corpus_dir: Path
    tokenizer_dir: Path
    corpus: str = ""           # data.corpora name, "" = the profile's corpus
    tokenizer: str = ""        # data.tokenizers name, "" = the profile's tokenizer
    vocab_multiple: int = 1
    fixed_text: str = ""       # data.corpora name of FixedSeqQK's text, "" = the pretraining corpus
    fixed_text_dir: Path | None = None  # its folder (run_data sets it: corpus_dir when fixed_text is "")

    def fixed_text_corpus(self, profile: str) -> str:
        """The name of the corpus FixedSeqQK's text comes from, for pretrain.json."""
        return self.fixed_text or self.corpus or f"profile {profile}"

    def describe(self, profile: str) -> dict:
        """For pretrain.json: what the run was trained on."""
        root = paths.project_root()

        def show(path: Path) -> str:
            try:
                return str(path.relative_to(root))
            except ValueError:
                return str(path)

        return {"corpus": self.corpus or f"profile {profile}", "corpus_dir": show(self.corpus_dir),
                "tokenizer": self.tokenizer or f"profile {profile}", "tokenizer_dir": show(self.tokenizer_dir)}


def run_data(config: dict, run) -> RunData:
    """The corpus, tokenizer and fixed-text directories ``run`` pretrains with (see the module docstring)."""
    profile = config["profile"]
    multiple = 1
    if run.pretrain_tokenizer:
        multiple = int(named(config, "tokenizers")[run.pretrain_tokenizer].get("vocab_multiple", 1))
    corpus = corpus_dir(profile, run.pretrain_corpus) if run.pretrain_corpus else paths.data_dir(profile) / "corpus"
    fixed_text = run.fixed_text_corpus
    return RunData(
        corpus_dir=corpus,
        tokenizer_dir=(tokenizer_dir(profile, run.pretrain_tokenizer) if run.pretrain_tokenizer
                       else paths.data_dir(profile) / "tokenizer"),
        corpus=run.pretrain_corpus,
        tokenizer=run.pretrain_tokenizer,
        vocab_multiple=multiple,
        fixed_text=fixed_text,
        fixed_text_dir=corpus_dir(profile, fixed_text) if fixed_text else corpus,
    )


# ------------------------------------------------------------------------------------ corpora
def row_field(row: Mapping[str, Any], dotted: str) -> Any:
    """``row["meta"]["redpajama_set_name"]`` for ``"meta.redpajama_set_name"`` (None when absent)."""
    node: Any = row
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def hub_documents(rows: Iterable[Mapping[str, Any]], name: str, text_field: str,
                  source_field: str | None = None) -> Iterator[Document]:
    """Hub rows -> corpus documents ``<name>:<position in the stream>`` (SlimPajama has no ids; the
    stream's order is fixed), their source the row's ``source_field`` (e.g. RedPajamaC4) or ``name``."""
    for position, row in enumerate(rows):
        if text_field not in row:
            raise DataError(f"corpus {name!r}: hub rows have no column {text_field!r} (key data.corpora.{name}"
                            f".text_field); columns: {', '.join(row)}")
        text = row[text_field]
        source = row_field(row, source_field) if source_field else None
        yield Document(f"{name}:{position}", str(source) if source else name, text if isinstance(text, str) else "")


def load_streaming_rows(name: str, spec: dict, profile: str):
    """The hub split ``spec`` names as a ``datasets`` IterableDataset (rows in the hub's schema).

    Fails at once, naming the dataset, when the hub is unreachable."""
    from leanlm.data.sources.hub import ensure_hub_reachable
    from leanlm.data.plumbing.mirror import mirrored_corpus

    mirrored = mirrored_corpus(spec["dataset"], spec.get("config"), spec["split"], profile)
    if mirrored is not None:
        return mirrored
    what = spec["dataset"] + (f"/{spec['config']}" if spec.get("config") else "")
    ensure_hub_reachable(f"corpus {name}: {what}", profile)
    import datasets

    try:
        return datasets.load_dataset(spec["dataset"], spec.get("config"), split=spec["split"], streaming=True)
    except Exception as exc:  # datasets raises many types (HTTP, FileNotFound, DatasetNotFound)
        raise DataError(f"could not stream {what} (split {spec['split']!r}, key data.corpora.{name}) from the "
                        f"Hugging Face hub: {exc}") from exc


def stream_corpus(name: str, spec: dict, profile: str) -> Iterator[Document]:
    """The first ``max_documents`` documents of corpus ``name`` (all when null), streamed."""
    rows = load_streaming_rows(name, spec, profile)
    documents = hub_documents(rows, name, spec["text_field"], spec.get("source_field"))
    return itertools.islice(documents, spec.get("max_documents"))



def write_digests(directory: Path) -> dict:
    """DIGESTS.json: ``{file: {"sha256", "bytes"}}`` of the split files in ``directory``."""
    digests = {path.name: {"sha256": sha256_file(path), "bytes": path.stat().st_size}
               for path in sorted(Path(directory).glob("*.jsonl"))}
    write_json(Path(directory) / DIGESTS_FILE, digests)
    return digests


def build_named_corpus(name: str, spec: dict, profile: str, out: Path) -> dict:
    """Stream corpus ``name`` into ``out`` (split files, STATS.json, DIGESTS.json); return the stats."""
    from leanlm.data.corpus import build_corpus

    started = time.perf_counter()
    stats = build_corpus(stream_corpus(name, spec, profile), out, validation_fraction=spec["validation_fraction"],
                         test_fraction=spec["test_fraction"], split_seed=spec["split_seed"])
    write_digests(out)
    log.info("corpus %s: %d documents from %s in %.1f s", name, stats["total"]["documents"], spec["dataset"],
             time.perf_counter() - started)
    return stats


def stage_corpora(config: dict, out: Path) -> None:
    corpora = named(config, "corpora")
    for name, spec in corpora.items():
        build_named_corpus(name, spec, config["profile"], out / name)
    write_json(out / "MANIFEST.json", {"corpora": corpora})


# ------------------------------------------------------------------------------------ tokenizers
def stage_tokenizers(config: dict, out: Path) -> None:
    from leanlm.data.tokenizer import hub_tokenizer, save_tokenizer

    tokenizers = named(config, "tokenizers")
    for name, spec in tokenizers.items():
        if spec["kind"] != "hub":
            raise ConfigError(f"key data.tokenizers.{name}.kind = {spec['kind']!r}; allowed: 'hub'")
        tokenizer = hub_tokenizer(spec["name"], config["profile"], key=f"data.tokenizers.{name}.name")
        tokenizer.no_truncation()  # ids of whole documents; packing cuts them
        tokenizer.no_padding()
        rows = embedding_rows(tokenizer.get_vocab_size(with_added_tokens=True), spec.get("vocab_multiple", 1))
        save_tokenizer(tokenizer, out / name, {"kind": "hub", "name": spec["name"], "embedding_rows": rows})
        log.info("tokenizer %s: %s, %d tokens, %d embedding rows", name, spec["name"],
                 tokenizer.get_vocab_size(with_added_tokens=True), rows)
    write_json(out / "MANIFEST.json", {"tokenizers": tokenizers})


_STAGES = {"corpora": stage_corpora, "tokenizers": stage_tokenizers}


def run_named_stage(stage: str, config: dict) -> Path:
    """Prepare every named corpus (``corpora``) or tokenizer (``tokenizers``) of the profile ``config``."""
    if stage not in _STAGES:
        raise ConfigError(f"unknown named-data stage {stage!r}; stages: {', '.join(_STAGES)}")
    final = paths.data_dir(config["profile"]) / stage
    with staged_dir(final) as out:
        _STAGES[stage](config, out)
    return final


# ------------------------------------------------------------------------------------ DVC and the CLI
def check_dvc_stages(config: dict, dvc_file: str | Path = "dvc.yaml") -> None:
    """ConfigError unless dvc.yaml runs the named-data stages for this profile (when it names data)."""
    import yaml

    if not any(named(config, kind) for kind in NAMED_KINDS):
        return
    path = Path(dvc_file)
    if not path.is_file():
        return
    variables = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("vars", [])
    listed = [p for entry in variables if isinstance(entry, dict) for p in entry.get(DVC_PROFILES_VAR, [])]
    if config["profile"] not in listed:
        raise ConfigError(f"{config['_params_file']} names pretraining data (data.corpora / data.tokenizers) but "
                          f"{path}'s vars {DVC_PROFILES_VAR} ({listed}) does not list profile "
                          f"{config['profile']!r}; add it there so that DVC has stages corpora@{config['profile']} and "
                          f"tokenizers@{config['profile']}")
