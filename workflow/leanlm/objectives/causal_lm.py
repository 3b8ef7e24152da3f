"""``causal_lm``: next-token prediction over the packed corpus (ch. 3's GPT-2, ch. 4's Qwen decoders)."""

from __future__ import annotations

from leanlm.stages.packed_batches import CausalLMBatches

from leanlm.stages.pretrain import PackedTextObjective


class CausalLMObjective(PackedTextObjective):
    head = "causal_lm"
    metric = "lm"

    def batches(self, settings, tokenizer, sequences, seed):
        return CausalLMBatches(sequences, settings["batch_size"], settings["grad_accum"], seed)


Objective = CausalLMObjective
