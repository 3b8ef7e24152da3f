"""The model library: configs, attention variants, the BERT encoder, task heads, counting, checkpoints.

    from leanlm.modeling import ModelConfig, BertForMLM
    model = BertForMLM(ModelConfig.preset("base", attention="mhe_mul"))
"""

from leanlm.modeling.attention import ATTENTION, Attention, build_attention
from leanlm.modeling.checkpoint import load_model, read_checkpoint_meta, save_checkpoint
from leanlm.modeling.config import PRESETS, ModelConfig
from leanlm.modeling.counting import (
    attention_formula,
    attention_parameters,
    embedding_parameters,
    model_attention_parameters,
    total_parameters,
)
from leanlm.modeling.encoder import BertEncoder
from leanlm.modeling.heads import BertForMLM, BertForSequenceClassification
from leanlm.modeling.models import MODELS, build_model, register_model, transfer_backbone

__all__ = [
    "ATTENTION", "Attention", "build_attention", "ModelConfig", "PRESETS", "BertEncoder",
    "BertForMLM", "BertForSequenceClassification", "MODELS", "build_model", "register_model", "transfer_backbone", "save_checkpoint",
    "load_model", "read_checkpoint_meta", "attention_parameters",
    "model_attention_parameters", "total_parameters", "embedding_parameters", "attention_formula",
]
