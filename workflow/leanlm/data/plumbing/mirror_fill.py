"""``leanlm mirror``: fill the hub mirror (:mod:`leanlm.data.plumbing.mirror`) on a machine with network.

Everything the profile's hub source reads is fetched through the same loaders the data stages use
(with the mirror switched off, so they go to the hub) and written in the hub's own schema:

- the task sets of every fine-tuned family (GLUE, SuperGLUE, SQuAD, WMT-14, WikiText-103, PTB):
  each dataset/config once, all its splits, ``DatasetDict.save_to_disk``;
- the data of ch. 4's lm-eval tasks (families ``lm_eval`` and ``analysis``): for each lm-eval task
  (``hub.task``), the dataset, config and splits lm-eval's own config of it reads
  (:func:`leanlm.lm_eval.configs.task_dataset`), fetched with the call lm-eval makes
  (``datasets.load_dataset(dataset_path, dataset_name, **dataset_kwargs)``) and saved like the task
  sets, in ``datasets/<dataset_path>/<dataset_name or "default">/`` (one folder when a fine-tuned task
  reads the same dataset, e.g. SuperGLUE BoolQ); :mod:`leanlm.lm_eval.mirror` points lm-eval's
  tasks at it;
- the pretraining corpora (Wikipedia + BookCorpus for ``source: hub``, the named ``data.corpora``):
  the streamed split, its first ``max_documents`` rows where the profile caps them;
- the hub tokenizers (``data.tokenizer`` of kind hub, ``data.tokenizers``): ``save_pretrained``;
- the hub checkpoints runs start from (objective ``hub``: CANINE-C): ``save_pretrained``.

Items already in the mirror are kept (delete a folder to fetch it again). ``MIRROR.json`` records the
profile, the items and the total size, which :func:`fill_mirror` also returns.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

from leanlm.data.plumbing import mirror
from leanlm.errors import ConfigError
from leanlm.io import write_json

log = logging.getLogger(__name__)

# Families whose tasks lm-eval reads itself (not through our hub loaders).
LM_EVAL_FAMILIES = ("lm_eval", "analysis")


def _save_dataset(target: Path, data) -> None:
    import datasets

    if not isinstance(data, datasets.DatasetDict):
        data = datasets.DatasetDict(dict(data))
    data.save_to_disk(str(target))


def _task_items(config: dict, root: Path) -> list[str]:
    from leanlm.data.sources import hub
    from leanlm.data.families import lm as lm_tasks
    from leanlm.data.families import squad
    from leanlm.data.plumbing.stages import _task_specs

    loaders = {"lm": lm_tasks.load_lm_dataset, "squad": squad.load_squad}
    done, items = set(), []
    for spec in _task_specs(config):
        if spec.family in LM_EVAL_FAMILIES:
            continue
        key = (spec.hub["dataset"], spec.hub.get("config"))
        if key in done:
            continue
        done.add(key)
        target = mirror.dataset_dir(root, *key)
        items.append(str(target.relative_to(root)))
        if (target / "dataset_dict.json").is_file():
            log.info("mirror: %s/%s already there", *key)
            continue
        log.info("mirror: %s/%s", *key)
        _save_dataset(target, loaders.get(spec.family, hub.load_hub_dataset)(spec, config["profile"]))
    return items


def _lm_eval_items(config: dict, root: Path) -> list[str]:
    """The datasets lm-eval's own configs of the profile's ch. 4 tasks read, all their splits."""
    import datasets

    from leanlm.data.sources import hub
    from leanlm.data.plumbing.stages import _task_specs
    from leanlm.lm_eval.configs import task_dataset

    names = dict.fromkeys(spec.hub["task"] for spec in _task_specs(config)
                          if spec.family in LM_EVAL_FAMILIES and spec.hub.get("task"))
    items = []
    for name in names:
        source = task_dataset(name)
        target = mirror.dataset_dir(root, source.path, source.name)
        item = str(target.relative_to(root))
        if item in items:
            continue
        items.append(item)
        if (target / "dataset_dict.json").is_file():
            log.info("mirror: %s/%s (lm-eval %s) already there", source.path, source.name, name)
            continue
        hub.ensure_hub_reachable(f"lm-eval task {name} ({source.path})", config["profile"])
        kwargs = {k: v for k, v in source.kwargs.items() if k != "trust_remote_code"}  # as lm-eval with datasets 4+
        log.info("mirror: %s/%s for lm-eval task %s", source.path, source.name, name)
        _save_dataset(target, datasets.load_dataset(source.path, source.name, **kwargs))
    return items


def _corpus_items(config: dict, root: Path) -> list[str]:
    import datasets

    from leanlm.data import pretrain_data
    from leanlm.data.sources import hub

    corpora = []
    if config["source"] == "hub":
        cap = (config["data"].get("corpus") or {}).get("max_documents")
        corpora += [(c["dataset"], c["config"], c["split"], cap) for c in hub.HUB_CORPORA]
    for name, spec in (config["data"].get("corpora") or {}).items():
        corpora.append((spec["dataset"], spec.get("config"), spec["split"], spec.get("max_documents")))
    items = []
    for dataset, name, split, cap in corpora:
        target = mirror.corpus_dir(root, dataset, name, split)
        items.append(str(target.relative_to(root)))
        if (target / "dataset_info.json").is_file():
            continue
        hub.ensure_hub_reachable(f"corpus {dataset}", config["profile"])
        stream = pretrain_data.load_streaming_rows(dataset, {"dataset": dataset, "config": name, "split": split},
                                                   config["profile"])
        rows = itertools.islice(stream, cap)
        log.info("mirror: corpus %s/%s %s (%s rows)", dataset, name, split, cap or "all")
        datasets.Dataset.from_generator(lambda: (dict(r) for r in rows), features=stream.features).save_to_disk(
            str(target))
    return items


def _tokenizer_items(config: dict, root: Path) -> list[str]:
    from transformers import AutoTokenizer

    from leanlm.data.sources import hub

    names = []
    if (config["data"].get("tokenizer") or {}).get("kind") == "hub":
        names.append(config["data"]["tokenizer"]["name"])
    names += [t["name"] for t in (config["data"].get("tokenizers") or {}).values() if t.get("name")]
    items = []
    for name in dict.fromkeys(names):
        target = mirror.tokenizer_dir(root, name)
        items.append(str(target.relative_to(root)))
        if (target / "tokenizer.json").is_file():
            continue
        hub.ensure_hub_reachable(f"tokenizer {name}", config["profile"])
        AutoTokenizer.from_pretrained(name, use_fast=True).save_pretrained(str(target))
    return items


def _model_items(config: dict, root: Path) -> list[str]:
    from transformers import AutoModel

    from leanlm.data.sources import hub
    from leanlm.runs import runs

    names = sorted({r.hub_checkpoint for r in runs(config)
                    if r.objective == "hub" and r.hub_checkpoint and not Path(r.hub_checkpoint).is_dir()})
    items = []
    for name in names:
        target = mirror.model_dir(root, name)
        items.append(str(target.relative_to(root)))
        if (target / "config.json").is_file():
            continue
        hub.ensure_hub_reachable(f"checkpoint {name}", config["profile"])
        AutoModel.from_pretrained(name).save_pretrained(str(target), safe_serialization=True)
    return items


def fill_mirror(config: dict, out: str | Path | None = None) -> dict:
    """Fill the mirror at ``out`` (default: the active mirror setting) with what ``config`` reads from
    the hub; returns MIRROR.json's record (items and ``bytes``)."""
    root = Path(out).expanduser().resolve() if out else mirror.configure_mirror(config)
    if root is None:
        raise ConfigError(f"{config['_params_file']}: no mirror to fill; pass --out DIR, or set "
                          f"{mirror.SETTING} in the profile (or {mirror.ENV_VAR})")
    if config["source"] != "hub":
        raise ConfigError(f"{config['_params_file']}: source is {config['source']!r}; only the hub source reads "
                          f"a mirror (the packaged source needs none)")
    if config["data"].get("hub_fixtures"):
        raise ConfigError(f"{config['_params_file']}: data.hub_fixtures is true, so its mirror is made of generated "
                          f"fixtures, not filled from the hub; run `leanlm fixtures --params {config['_params_file']}`")
    mirror.disable_mirror()  # the loaders below must go to the hub, not to the mirror being filled
    try:
        items = {"datasets": _task_items(config, root), "lm_eval": _lm_eval_items(config, root),
                 "corpora": _corpus_items(config, root),
                 "tokenizers": _tokenizer_items(config, root), "models": _model_items(config, root)}
    finally:
        mirror.configure_mirror(config)
    record = {"profile": config["profile"], "items": items, "bytes": mirror.directory_size(root)}
    write_json(root / "MIRROR.json", record)
    return record
