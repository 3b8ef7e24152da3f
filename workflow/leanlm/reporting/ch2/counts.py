"""Table 2.2's parameter columns: #Total, #Emb, PCR (All), PCR (Emb) and PoEP.

Counts follow Appendix 2.8: every learnable parameter of the model on a binary classification task
(#Total), and the parameters that retrieve or generate token embeddings, special tokens and
positions excluded (#Emb). The baseline BERT-MLM is RoBERTa-base (50,265 BPE entries, 514
positions, one token type): 124.6M / 38.6M. HashFormers are the same encoder with a hash embedding
(leanlm.modeling.hash_embeddings), built on the meta device and counted. CANINE-C's and ProFormer's
#Emb come from Appendix 2.8's formulas (16,000 buckets x d; 420 bits x d; DESIGN §8).

- CANINE-C #Total is the thesis's 121.0M: it cannot be derived here (``transformers``'
  CanineForSequenceClassification with google/canine-c's config has 132.1M).
- ProFormer #Total is the model the pipeline trains (params/experiments/ch2.yaml): two BERT-base
  blocks, its 420 x d projection (with bias), pooler and classifier, with fixed sinusoidal positions and
  no token-type table, so nothing is subtracted: 15.1M, as printed.

The metrics (§2.4.4): PCR_All = 1 - #Total / #Total_baseline, PCR_Emb = 1 - #Emb / #Emb_baseline,
PoEP = #Emb / #Total, in percent. The thesis evaluates them on the printed (rounded) counts, which is
the only way CANINE-C's PCR (Emb) comes out at 68.1 (the exact ratio gives 68.2), so we do too. One
printed value is not reproducible either way: PoEP of Emb (1K) and Pool is printed 1.0, while
797.2K / 86.8M is 0.92% (0.9).
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from leanlm.modeling.config import ModelConfig
from leanlm.modeling.counting import total_parameters
from leanlm.modeling.heads import BertForSequenceClassification

D_MODEL = 768
CANINE_BUCKETS = 16_000  # Eq. 2.10 (Clark et al. 2022a)
CANINE_TOTAL_REPORTED = 121_000_000  # Table 2.2, not derivable here (see module docstring)
PROFORMER_BITS = 420  # Eq. 2.11 (Sankar et al. 2021b)

ROBERTA_BASE = dict(vocab_size=50265, n_layers=12, d_model=D_MODEL, n_heads=12, head_dim=64, d_ff=3072,
                    max_position=514, type_vocab_size=1, pad_token_id=1, position_offset=2)

# Table 2.2's HashFormer rows: (name, embedding, embedding_options); MD and LSH rows have the same
# counts, since hashing has no parameters.
HASHFORMER_ROWS = [
    ("Emb (50K)", "hash_emb", {"buckets": "50K"}),
    ("Emb (1K)", "hash_emb", {"buckets": "1K"}),
    ("Pool", "hash_pool", {"bits": 128, "k": 10}),
    ("Add", "hash_add", {"bits": 128}),
    ("Proj", "hash_proj", {"bits": 128}),
]


def format_count(n: float) -> str:
    """The thesis's style: 124.6M, 797.2K (one decimal)."""
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def printed_value(n: float) -> float:
    """A count as printed, back as a number (124,647,170 -> 124.6e6)."""
    scale = 1e6 if n >= 1e6 else 1e3
    return round(n / scale, 1) * scale


def pcr(count: float, baseline: float) -> float:
    """Parameters compression ratio (Eqs. 2.5, 2.6), percent."""
    return 100.0 * (1.0 - count / baseline)


def poep(emb: float, total: float) -> float:
    """Proportion of embedding parameters (Eq. 2.7), percent."""
    return 100.0 * emb / total


def classifier_on_meta(config: ModelConfig) -> BertForSequenceClassification:
    # Shapes are all counting needs; the meta device allocates nothing.
    with torch.device("meta"):
        return BertForSequenceClassification(config, num_labels=2)


def counted(model: BertForSequenceClassification) -> tuple[int, int]:
    """(#Total, #Emb) of a model: all parameters, and its word embedding's Appendix 2.8 count."""
    return total_parameters(model), model.encoder.embeddings.word_embeddings.embedding_parameter_count()


def hashformer_config(embedding: str, options: dict) -> ModelConfig:
    # Hash embeddings embed the codebook's special rows themselves ([PAD] = row 0).
    return ModelConfig(**{**ROBERTA_BASE, "pad_token_id": 0}, embedding=embedding,
                       embedding_options=dict(options))


def proformer_counts() -> tuple[int, int]:
    # As trained (params/experiments/ch2.yaml): no learned position or token-type table (DESIGN §8).
    config = ModelConfig(**{**ROBERTA_BASE, "pad_token_id": 0, "n_layers": 2, "type_vocab_size": 0},
                         positions="sinusoidal", embedding="proformer", embedding_options={"bits": PROFORMER_BITS})
    return total_parameters(classifier_on_meta(config)), PROFORMER_BITS * D_MODEL


def table_2_2_parameter_rows() -> pd.DataFrame:
    """One row per Table 2.2 model (plus the BERT-MLM baseline): counts, printed strings, metrics.

    Columns: group, model, total, emb, total_printed, emb_printed, pcr_all, pcr_emb, poep (rounded to
    one decimal as printed), source (how the counts were obtained).
    """
    base_total, base_emb = counted(classifier_on_meta(ModelConfig(**ROBERTA_BASE)))
    rows = [("Baseline", "BERT-MLM", base_total, base_emb, "instantiated"),
            ("Baselines", "CANINE-C", CANINE_TOTAL_REPORTED, CANINE_BUCKETS * D_MODEL,
             "#Emb: Eq. 2.10; #Total: reported"),
            ("Baselines", "ProFormer", *proformer_counts(), "#Emb: Eq. 2.11; #Total: instantiated")]
    hash_counts = {name: counted(classifier_on_meta(hashformer_config(emb, opts)))
                   for name, emb, opts in HASHFORMER_ROWS}
    for group in ("HashFormers-MD", "HashFormers-LSH"):
        rows += [(group, name, *hash_counts[name], "instantiated") for name, _, _ in HASHFORMER_ROWS]

    frame = pd.DataFrame(rows, columns=["group", "model", "total", "emb", "source"])
    shown_total = frame["total"].map(printed_value)
    shown_emb = frame["emb"].map(printed_value)
    ref_total, ref_emb = printed_value(base_total), printed_value(base_emb)
    frame["total_printed"] = frame["total"].map(format_count)
    frame["emb_printed"] = frame["emb"].map(format_count)
    frame["pcr_all"] = [_round1(pcr(t, ref_total)) for t in shown_total]
    frame["pcr_emb"] = [_round1(pcr(e, ref_emb)) for e in shown_emb]
    frame["poep"] = [_round1(poep(e, t)) for e, t in zip(shown_emb, shown_total)]
    return frame[["group", "model", "total", "emb", "total_printed", "emb_printed", "pcr_all",
                  "pcr_emb", "poep", "source"]]


def _round1(x: float) -> float:
    # Half away from zero, as a person rounds for print (Python's round() is half-to-even).
    return math.floor(abs(x) * 10 + 0.5) / 10 * (1 if x >= 0 else -1) + 0.0
