"""The tokenizer a trained model reads, when it is not the profile's (ch. 4's Pythia BPE, ch. 2's RoBERTa BPE).

A run whose experiment names a tokenizer (``pretrain_data.tokenizer``, resolved by the profile:
``Run.pretrain_tokenizer``) is pretrained with it, and its pretraining saves a copy beside the weights,
``models/<profile>/<run>/tokenizer.json``, so that evaluation scores with exactly the tokenizer the model
was trained with, whatever has since happened to data/. Evaluation (the ``lm_eval`` and ``analysis``
families; GLUE fine-tuning of ch. 2's BERTs on RoBERTa's BPE, through
:mod:`leanlm.routes.subword`) asks :func:`evaluation_tokenizer`: that copy
for such runs (the evaluated model's, for ``evaluate_from`` runs like Table 4.1's skip), the profile's
tokenizer otherwise. A ch. 2 hash_subword run saves the pieces its codebook hashes
(:func:`saved_run_tokenizer`). Runs with the profile's tokenizer save nothing, so their model
directories are as before. :func:`subword_tokenizer` is the one a run pretrains with (named or the profile's).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from leanlm import paths
from leanlm.errors import DataError
from leanlm.io import atomic_path

RUN_TOKENIZER_FILE = "tokenizer.json"


def save_run_tokenizer(tokenizer, model_dir: str | Path, keep: bool) -> Path | None:
    """Save ``tokenizer`` as the model's (``keep``: a named tokenizer), or remove a stale copy left by an
    earlier configuration of the run (``keep`` False), so the directory never holds the wrong one."""
    path = Path(model_dir) / RUN_TOKENIZER_FILE
    if not keep:
        path.unlink(missing_ok=True)
        return None
    with atomic_path(path, suffix=".json") as tmp:
        tokenizer.save(str(tmp))
    return path


@lru_cache(maxsize=4)
def _load(path: str, stamp: int):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
        raise DataError(f"{path} is not a valid tokenizers file ({exc}); re-run the run's pretraining") from exc


def _vocab_rows(model_dir: Path) -> int | None:
    from leanlm.modeling.checkpoint import read_checkpoint_meta

    try:
        return int(read_checkpoint_meta(model_dir)["model"]["vocab_size"])
    except Exception:  # no or an odd checkpoint: loading the model reports that better
        return None


def saved_run_tokenizer(config: dict, run_id: str):
    """The tokenizer saved beside the model run ``run_id`` evaluates (its own, or its ``evaluate_from``
    target's) when that trained run names a tokenizer, else None. DataError when the copy is missing."""
    from leanlm.runs import get_run

    run = get_run(config, run_id)
    trained = get_run(config, run.evaluate_from) if run.evaluate_from else run
    if not trained.pretrain_tokenizer:
        return None
    path = paths.models_dir(config["profile"]) / trained.run_id / RUN_TOKENIZER_FILE
    if not path.is_file():
        raise DataError(f"{path} is missing: run {trained.run_id} pretrains with tokenizer "
                        f"{trained.pretrain_tokenizer!r} (data.tokenizers), which its pretraining saves beside the "
                        f"model; re-run `leanlm pretrain --run {trained.run_id}`")
    return _load(str(path), path.stat().st_mtime_ns)


def evaluation_tokenizer(config: dict, run_id: str, fallback):
    """The tokenizer run ``run_id`` is evaluated (or fine-tuned) with: its trained model's saved copy
    when the trained run names a tokenizer (:func:`saved_run_tokenizer`), else ``fallback`` (the
    profile's). DataError when the copy is missing or has more tokens than the model has embedding rows."""
    from leanlm.runs import get_run

    run = get_run(config, run_id)
    trained = get_run(config, run.evaluate_from) if run.evaluate_from else run
    model_dir = paths.models_dir(config["profile"]) / trained.run_id
    saved = saved_run_tokenizer(config, run_id)
    tokenizer = fallback if saved is None else saved
    rows = _vocab_rows(model_dir)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if rows is not None and size > rows:
        raise DataError(f"the tokenizer evaluating run {run_id} has {size} tokens but the model in {model_dir} has "
                        f"{rows} embedding rows: it was trained with another tokenizer; re-run its pretraining")
    return tokenizer


def subword_tokenizer(config: dict, run):
    """The run's subword tokenizer: its named one (``Run.pretrain_tokenizer``, prepared in
    data/<profile>/tokenizers/<name>/), else the profile's."""
    from leanlm.data.pretrain_data import run_data
    from leanlm.data.tokenizer import load_tokenizer

    return load_tokenizer(run_data(config, run).tokenizer_dir if run.pretrain_tokenizer else config["profile"])
