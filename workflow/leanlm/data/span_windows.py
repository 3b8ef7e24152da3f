"""How a span-QA context is cut into windows (SQuAD, thesis §3.4): the settings and their checks.

A feature is ``[CLS] question [SEP] context-window [SEP]``: the question keeps at most
:data:`MAX_QUERY_TOKENS` tokens (less in a short sequence, so that a window keeps at least half of it),
and consecutive windows overlap by ``doc_stride`` tokens. A stride as long as the window's room would
never advance. The checks live here, apart from the runner (:mod:`leanlm.runners.span_qa`), so that
profile validation (:mod:`leanlm.profile_checks`) refuses such a profile before any job without
importing the training stack.
"""

from __future__ import annotations

from leanlm.errors import ConfigError

MAX_QUERY_TOKENS = 64          # BERT's max_query_length
DEFAULTS = {"doc_stride": 128, "max_answer_length": 30, "n_best": 20}  # run_qa's defaults


def query_budget(max_seq_len: int) -> int:
    """Question tokens kept: BERT's 64, or less so that a context window keeps at least half."""
    return min(MAX_QUERY_TOKENS, (max_seq_len - 3) // 2)


def check_window(max_seq_len: int, doc_stride: int, where: str) -> None:
    room = max_seq_len - 3 - query_budget(max_seq_len)
    if not 0 <= doc_stride < room:
        raise ConfigError(f"{where}: doc_stride={doc_stride} must be below the {room} context tokens a window "
                          f"can hold (max_seq_len {max_seq_len} - 3 special tokens - up to "
                          f"{query_budget(max_seq_len)} question tokens); lower doc_stride or raise max_seq_len")


def span_options(settings: dict, family: str) -> dict:
    """doc_stride, max_answer_length, n_best from finetune.<family> (run_qa's defaults if absent)."""
    options = {key: settings.get(key, default) for key, default in DEFAULTS.items()}
    for key, value in options.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "doc_stride" else 1):
            raise ConfigError(f"key finetune.{family}.{key} = {value!r} must be a positive integer")
    check_window(settings["max_seq_len"], options["doc_stride"], f"key finetune.{family}")
    return options
