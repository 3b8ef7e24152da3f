"""``mlm``: BERT's masked language modelling over the packed corpus (chs. 2-3 encoders)."""

from __future__ import annotations

from leanlm.data.tokenizer import special_token_id
from leanlm.stages.packed_batches import MLMBatches, special_token_ids
from leanlm.stages.pretrain import PackedTextObjective


class MLMObjective(PackedTextObjective):
    head = "mlm"
    metric = "mlm"

    def batches(self, settings, tokenizer, sequences, seed):
        return MLMBatches(sequences, special_token_ids(tokenizer), special_token_id(tokenizer, "mask"),
                          tokenizer.get_vocab_size(), settings["batch_size"], settings["grad_accum"],
                          settings["mask_prob"], seed)


Objective = MLMObjective
