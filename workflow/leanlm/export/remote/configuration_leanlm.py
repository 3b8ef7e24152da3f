"""The configuration of a leanlm model exported with its own modeling code (``trust_remote_code``).

This file is copied verbatim into every such export (``leanlm export-hf``) and must import nothing but
``transformers``: the export loads where leanlm is not installed. ``config.json`` holds leanlm's model
fields under leanlm's names (``backbone``, ``d_model``, ``n_heads``, ``attention``, ...) plus what the
export computed from them (``layer_kinds`` of a ch. 4 decoder, ``mlp_mixer_width``); the modeling file
reads them by those names. ``hidden_size`` and friends are aliases for the tools that look for them.
``model_type`` is ``leanlm_<backbone>``, one configuration class per backbone.
"""

from transformers import PretrainedConfig


class LeanLMConfig(PretrainedConfig):
    """Every field of the export's ``config.json`` becomes an attribute (transformers keeps unknown keys)."""

    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "n_layers",
                     "num_attention_heads": "n_heads", "max_position_embeddings": "max_position"}


# One configuration class per backbone: transformers' Auto classes map a configuration class to one model
# class per task, so a BERT and a GPT-2 classifier loaded in one process need two.
class LeanBertConfig(LeanLMConfig):
    model_type = "leanlm_bert"


class LeanGPT2Config(LeanLMConfig):
    model_type = "leanlm_gpt2"


class LeanQwenConfig(LeanLMConfig):
    model_type = "leanlm_qwen"


class LeanTransformerConfig(LeanLMConfig):
    model_type = "leanlm_transformer"
