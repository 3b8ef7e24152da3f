"""Ch. 3's encoder-decoder (``backbone: transformer``, the translation model) with any of its softmax attention
variants as ``modeling_leanlm_seq2seq.py``'s ``LeanTransformerForSeq2SeqLM`` (``trust_remote_code``,
``AutoModelForSeq2SeqLM``): no stock class has its layout (post-LN, sinusoidal positions, one matrix shared by
source, target and softmax, the variant in every attention sublayer).

``config.json`` holds every leanlm model field under its own name, and the ids ``generate()`` needs (the
translation tokenizer's <pad>=0, <s>=2 the decoder's first input, </s>=3). The weights keep leanlm's names,
the shared table once. The run's BPE ships with a post-processor that ends a text with </s>, so
``tokenizer(source, text_target=target)`` gives leanlm's source ids and labels (:func:`translation_tokenizer`).
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, processors
from torch import nn

from leanlm.errors import DataError
from leanlm.export.remote.ch3 import ATTENTION_MODELING, SIZES
from leanlm.export.remote.files import CONFIG_FILE, leanlm_fields
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.hf_layout.fields import Rule, Target, check_fields, export_kind, only
from leanlm.modeling.seq2seq import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from leanlm.modeling.vocab import unpadded_state_dict

MODELING = "modeling_leanlm_seq2seq"
CLASS = "LeanTransformerForSeq2SeqLM"
# transformers' special-token keyword -> (id, token) of the translation BPE, whose ids the model's are
# (leanlm.modeling.seq2seq); the tokens are leanlm.training.translation_pairs.SPECIAL_TOKENS, which sits above
# the export (tests/test_export_seq2seq.py checks they agree).
SPECIALS = {"pad_token": (PAD_ID, "<pad>"), "unk_token": (UNK_ID, "<unk>"), "bos_token": (BOS_ID, "<s>"),
            "eos_token": (EOS_ID, "</s>")}


def _cross_attention() -> set[str]:
    """The template's attention variants that attend from the decoder to the source (softmax attention; the
    token mixers have no cross form, and leanlm builds no encoder-decoder with them)."""
    from leanlm.export.remote import modeling_leanlm_attention as template

    return {name for name, cls in template.ATTENTION.items() if issubclass(cls, template.Attention)}


def hf_leanlm_seq2seq(model: nn.Module, where: str = "model") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json fields, weights)`` of a leanlm encoder-decoder for ``LeanTransformerForSeq2SeqLM``."""
    config: ModelConfig = model.config
    cls = check_fields(config, LEANLM_TRANSFORMER, export_kind(model), where)
    fields = {**leanlm_fields(config, "seq2seq", MODELING, cls), "is_encoder_decoder": True,
              "decoder_start_token_id": BOS_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "use_cache": False}
    # The encoder's and decoder's embedders hold the shared table too: it is written once, as embed_tokens.
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in unpadded_state_dict(model).items()
               if not k.endswith(".embed.tokens.weight")}
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    return fields, tensors


def translation_tokenizer(tokenizer: Tokenizer, where: str) -> tuple[Tokenizer, dict[str, str]]:
    """The run's BPE as transformers' tokenizer reads it: a text ends with </s> (leanlm's source, and its
    labels), and the special tokens by role (<s> begins the target: ``decoder_start_token_id``)."""
    found = {role: tokenizer.id_to_token(index) for role, (index, _token) in SPECIALS.items()}
    if found != {role: token for role, (_index, token) in SPECIALS.items()}:
        raise DataError(f"{where}: the run's tokenizer has {found}, not the translation BPE's special tokens "
                        f"{SPECIALS} (id, token): it is not the tokenizer the model was trained with; nothing "
                        f"was written")
    ended = Tokenizer.from_str(tokenizer.to_str())
    eos_id, eos = SPECIALS["eos_token"]
    ended.post_processor = processors.TemplateProcessing(single=f"$A {eos}", pair=f"$A {eos} $B {eos}",
                                                         special_tokens=[(eos, eos_id)])
    return ended, found


LEANLM_TRANSFORMER = Target(
    backbone="transformer",
    family="leanlm encoder-decoder (trust_remote_code)",
    classes={"seq2seq": CLASS},
    carried=(SIZES - {"position_offset"}) | {"n_decoder_layers", "tie_word_embeddings"},
    # The encoder-decoder numbers positions from 0 with fixed sinusoids and has no token types; RoPE and
    # ch. 4's layouts are the Qwen decoder's.
    unused=frozenset({"positions", "position_offset", "type_vocab_size", "rope_theta", "layout"}),
    pinned={
        "attention": Rule(lambda v, _c: v in _cross_attention(),
                          f"{ATTENTION_MODELING}.py's softmax attention variants only: the decoder attends to the "
                          f"source, which a token mixer cannot"),
        "embedding": only("standard", says="the encoder-decoder has one shared table"),
        "embedding_options": only({}, says="they configure a non-standard embedding"),
        "qk_norm": only(False, says="ch. 3's backbones have no q/k normalisation"),
    },
    build=hf_leanlm_seq2seq,
    code=(CONFIG_FILE, f"{MODELING}.py", f"{ATTENTION_MODELING}.py"),
)
