"""What computes a ch. 2 hash embedding's inputs from text, written beside an export (``trust_remote_code``).

A hash embedding (HashFormers, ProFormer, EELBERT) reads per-token features (``hash_bits``, ``hash_buckets``,
``char_ngram_hashes``: leanlm.modeling.hash_features) that leanlm's hashing route computes from the token's
text with the run's codebook (leanlm.routes.hashing). The export ships that route as files:

- ``tokenization_leanlm_hash.py``: the template ``LeanHashTokenizer`` (``AutoTokenizer`` with
  ``trust_remote_code``), which cuts, numbers, hashes and returns the features beside ``input_ids``;
- ``hash_codebook.json``: the hasher (MD5's key; LSH's n-gram vocabulary), the bits and buckets, the features
  the model reads, and which text the run hashed (words, or the pieces of its subword tokenizer);
- ``hash_codebook.safetensors`` (LSH): the hyperplanes and the rotation vector, as drawn by leanlm (float64);
- ``hash_pieces.json`` (pieces): the subword tokenizer whose pieces were hashed.

Which text a run hashed (``tokenizer: hash`` words or ``hash_subword`` pieces) is the run's setting, not the
checkpoint's: it is read from the profile the checkpoint records (``extra.profile``, ``extra.run_id``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from leanlm.errors import ConfigError, DataError
from leanlm.export.remote.files import copy_code
from leanlm.io import write_json
from leanlm.modeling.config import ModelConfig

TOKENIZATION = "tokenization_leanlm_hash"
TOKENIZER_CLASS = "LeanHashTokenizer"
PROBE_TEXTS = ["The cat sat on the mat.", "Hashing words: an unlimited vocabulary, 11.9M tokens!"]
PROBE_PAIRS = (["a dog ran in the park", "[MASK] is special"], ["fast, faster, fastest.", "so is [SEP] here"])


def reads_features(config: ModelConfig) -> bool:
    """Whether the model's word embedding reads hash features (not only token ids)."""
    from leanlm.modeling.hash_features import embedding_features

    return bool(embedding_features(config))


def embedding_options(config: ModelConfig) -> dict[str, Any]:
    """The embedding's settings with its defaults filled in and named sizes resolved (Emb's ``1K`` -> 1037),
    as the template reads them."""
    from leanlm.modeling.embedding_options import read_options
    from leanlm.modeling.hash_features import emb_buckets
    from leanlm.modeling.variants import EMBEDDINGS

    options = read_options(config, EMBEDDINGS.get(config.embedding).defaults)
    if "buckets" in options:
        options["buckets"] = emb_buckets(options["buckets"], config)
    return options


def hash_route(meta: dict, where: str) -> str:
    """The run's ``tokenizer`` (``hash``: words; ``hash_subword``: pieces), from its profile."""
    from leanlm import paths

    extra = meta.get("extra") or {}
    profile, run_id = extra.get("profile"), extra.get("run_id")
    params = paths.params_dir() / f"{profile}.yaml"
    if not (isinstance(profile, str) and isinstance(run_id, str) and params.is_file()):
        raise ConfigError(f"{where}: a hash-embedding model's export needs to know whether its run hashed words "
                          f"or subword pieces, which the run's settings say; the checkpoint records profile="
                          f"{profile!r} and run_id={run_id!r}, and {params} is not a profile; nothing was written")
    known = _run_tokenizers(str(params))
    if run_id not in known:
        raise ConfigError(f"{where}: the checkpoint records run_id={run_id!r}, which {params} does not define, so "
                          f"whether it hashed words or subword pieces is unknown; nothing was written")
    return known[run_id]


@lru_cache(maxsize=2)
def _run_tokenizers(params: str) -> dict[str, str]:
    from leanlm.config import load_config
    from leanlm.runs import runs

    return {run.run_id: run.tokenizer for run in runs(load_config(params))}


def write_hash_inputs(checkpoint: Path, meta: dict, config: ModelConfig, out: Path, max_length: int, where: str):
    """Write the files above into ``out``; returns leanlm's own tokenizer of the run (for the export's check)."""
    from leanlm.data.tokenizer import SPECIAL_ROLES, special_token_id
    from leanlm.export.tokenizer import run_tokenizer
    from leanlm.hashing.codebook import HashCodebook
    from leanlm.hashing.inputs import CODEBOOK_DIR, CodebookTokenizer, PieceCodebookTokenizer
    from leanlm.hashing.words import SPECIAL_TOKENS
    from leanlm.modeling.hash_features import embedding_features

    route = hash_route(meta, where)
    if route == "hash" and meta["kind"] == "mlm":
        raise ConfigError(f"{where}: an MLM head over hashed words predicts rows of its pretraining codebook, whose "
                          f"numbering (first-seen order over the corpus) is not saved, so its logits name no word; "
                          f"nothing was written")
    if not (checkpoint / CODEBOOK_DIR / "codebook.json").is_file():
        raise DataError(f"{where}: {checkpoint / CODEBOOK_DIR} is missing: the hash codebook the run's "
                        f"pretraining saves beside the model (its hasher) is what computes the model's inputs; "
                        f"nothing was written")
    book = HashCodebook.load(checkpoint / CODEBOOK_DIR)
    names = list(embedding_features(config))
    options = embedding_options(config)
    state: dict[str, Any] = {"format": "leanlm-hash-tokenizer", "route": route, "features": names,
                             "hash": None, "n_bits": book.n_bits, "n_buckets": book.n_buckets,
                             "ngram": options.get("ngram"), "max_chars": options.get("max_chars")}
    hasher = book.hasher.to_dict()
    if "hash_bits" in names or "hash_buckets" in names:
        state["hash"] = hasher["kind"]
        if hasher["kind"] == "md5":
            state["key"] = hasher["key"]
        else:
            state.update(ngrams=hasher["vocabulary"]["ngrams"], n_max=hasher["vocabulary"]["n_max"])
            tables = {"planes": torch.from_numpy(book.hasher.planes).contiguous()}
            if book.n_buckets:
                tables["eta"] = torch.from_numpy(book.hasher.rotator(book.n_buckets)).contiguous()
            save_file(tables, str(out / "hash_codebook.safetensors"))
    leanlm_tokenizer = CodebookTokenizer(book)
    if route == "hash_subword":
        pieces, _source = run_tokenizer(checkpoint, meta)
        state["special_pieces"] = {pieces.id_to_token(special_token_id(pieces, role)): name
                                   for role, name in zip(SPECIAL_ROLES, SPECIAL_TOKENS)
                                   if special_token_id(pieces, role) is not None}
        plain = type(pieces).from_str(pieces.to_str())
        plain.no_truncation()
        plain.no_padding()
        plain.save(str(out / "hash_pieces.json"))
        leanlm_tokenizer = PieceCodebookTokenizer(plain, HashCodebook(book.hasher, book.n_buckets))
    write_json(out / "hash_codebook.json", state)
    specials = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), SPECIAL_TOKENS))
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": TOKENIZER_CLASS, "auto_map": {"AutoTokenizer": [f"{TOKENIZATION}.{TOKENIZER_CLASS}", None]},
        "model_max_length": max_length, **specials})
    write_json(out / "special_tokens_map.json", specials)
    copy_code((f"{TOKENIZATION}.py",), out)
    return leanlm_tokenizer


def _leanlm_batch(tokenizer, inputs: list, config: ModelConfig) -> dict[str, torch.Tensor]:
    from leanlm.hashing.inputs import feature_hook

    encodings = tokenizer.encode_batch(inputs)
    width = max(len(e.ids) for e in encodings)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encodings])
    types = torch.tensor([e.type_ids + [0] * (width - len(e.type_ids)) for e in encodings])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encodings])
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            **feature_hook(config, tokenizer)(ids)}


def probe_batches(tokenizer, config: ModelConfig, directory: Path) -> list[tuple[dict, dict]]:
    """``(leanlm's batch, the export's tokenizer's batch)`` of the same texts and pairs: the export's check."""
    from transformers import AutoTokenizer

    exported = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=True)
    texts, pairs = PROBE_TEXTS, list(zip(*PROBE_PAIRS))
    return [(_leanlm_batch(tokenizer, texts, config), dict(exported(texts, return_tensors="pt"))),
            (_leanlm_batch(tokenizer, pairs, config), dict(exported(*PROBE_PAIRS, return_tensors="pt")))]


def fields_of(config: ModelConfig) -> dict[str, Any]:
    """config.json's ``embedding_options``, resolved (leanlm.export.remote.ch3 writes the rest)."""
    return {"embedding_options": embedding_options(config)} if config.embedding != "standard" else {}

