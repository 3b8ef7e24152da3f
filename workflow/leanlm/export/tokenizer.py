"""The run's tokenizer as ``transformers``' files (``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``), so ``AutoTokenizer.from_pretrained(OUT)`` gives the ids leanlm trained on.

Which tokenizer a checkpoint was trained with (:func:`run_tokenizer`): the copy its pretraining saved beside
the weights (``tokenizer.json``: runs with a named tokenizer, ch. 4's Pythia BPE; leanlm.training.run_tokenizer),
else its profile's (``data/<profile>/tokenizer/tokenizer.json``, the profile read from the checkpoint's
``extra.profile``, which pretraining records).

The special tokens are declared by role (leanlm.data.tokenizer): BERT's five ([PAD] [UNK] [CLS] [SEP]
[MASK], or RoBERTa's <pad> <unk> <s> </s> <mask>), and for an end-of-text BPE its ``<|endoftext|>`` as
beginning and end of text, as GPT-2 and Pythia declare it. Without them ``AutoTokenizer`` knows no special
tokens; without the ``tokenizer.json`` it builds a 5-token vocabulary of unknowns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from leanlm.data.tokenizer import ROLE_NAMES, TOKENIZER_FILE, eos_token_id, load_tokenizer, special_token_id
from leanlm.errors import DataError
from leanlm.io import write_json

# transformers' keyword for each of leanlm's special-token roles.
ROLE_KEYWORDS = {"pad": "pad_token", "unk": "unk_token", "cls": "cls_token", "sep": "sep_token",
                 "mask": "mask_token"}


def run_tokenizer(checkpoint: Path, meta: dict[str, Any]) -> tuple[Tokenizer, Path]:
    """The tokenizer the checkpoint in ``checkpoint`` was trained with, and the file it came from."""
    saved = checkpoint / TOKENIZER_FILE
    if saved.is_file():
        return load_tokenizer(saved), saved
    profile = (meta.get("extra") or {}).get("profile")
    if not isinstance(profile, str) or not profile:
        raise DataError(f"{checkpoint} has no {TOKENIZER_FILE} and its config.json names no profile "
                        f"(extra.profile) whose tokenizer it was trained with; the export needs the tokenizer")
    return load_tokenizer(profile), Path("data") / profile / "tokenizer" / TOKENIZER_FILE


def special_tokens(tokenizer: Tokenizer) -> dict[str, str]:
    """transformers' special-token keywords -> the tokens, for the roles the tokenizer has."""
    found = {}
    for role, keyword in ROLE_KEYWORDS.items():
        index = special_token_id(tokenizer, role)
        if index is not None:
            found[keyword] = tokenizer.id_to_token(index)
    eos = eos_token_id(tokenizer)
    if eos is not None and not any(tokenizer.id_to_token(eos) in names for names in ROLE_NAMES.values()):
        # GPT-2 / Pythia's <|endoftext|>: begins and ends a text (lm-eval's HFLM starts an empty context with it)
        found["bos_token"] = found["eos_token"] = tokenizer.id_to_token(eos)
    return found


def write_tokenizer(tokenizer: Tokenizer, out: Path, model_max_length: int, token_types: bool = False,
                    specials: dict[str, str] | None = None) -> dict[str, str]:
    """Write the three files into ``out``; returns the special tokens declared.

    The copy has truncation and padding off (a leanlm tokenizer may carry them; transformers applies its
    own from its arguments) and ``model_max_length`` the model's longest input. ``token_types``: the model
    reads token type ids (BERT with a token-type table), so the tokenizer returns them (a pair's second text
    is type 1); transformers' fast tokenizer leaves them out unless told. ``specials``: the special tokens by
    transformers' keyword, when the roles are not BERT's or an end-of-text BPE's (the translation BPE's)."""
    from transformers import PreTrainedTokenizerFast

    plain = Tokenizer.from_str(tokenizer.to_str())
    plain.no_truncation()
    plain.no_padding()
    specials = special_tokens(plain) if specials is None else specials
    names = ["input_ids", "token_type_ids", "attention_mask"] if token_types else ["input_ids", "attention_mask"]
    fast = PreTrainedTokenizerFast(tokenizer_object=plain, model_max_length=model_max_length,
                                   model_input_names=names, **specials)
    fast.save_pretrained(str(out))
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    # The class every transformers version knows (v5 writes its own backend's name, unknown to v4).
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    write_json(config_path, config)
    write_json(out / "special_tokens_map.json", specials)  # read by transformers v4 and other tools
    return specials


def check_fits(tokenizer: Tokenizer, vocab_size: int, source: Path) -> None:
    """DataError when the tokenizer has more tokens than the model has vocabulary rows (another run's)."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise DataError(f"the tokenizer {source} has {size} tokens but the model has vocab_size={vocab_size}: "
                        f"it is not the tokenizer the model was trained with")
