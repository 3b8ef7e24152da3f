#!/usr/bin/env bash
# The measurements recorded in docs/benchmarks.md: pretraining throughput (MLM step: forward,
# backward, AdamW) of the BERT-base encoder with MHA and with MHE-MUL. On a GPU the report also
# gives MFU against the device's bf16 dense peak. Results go to bench/<device>/*.json.
#   bash scripts/bench.sh            # defaults: CPU-friendly sizes here, full sizes on CUDA
set -euo pipefail
cd "$(dirname "$0")/.."
LEANLM=${LEANLM:-.venv/bin/leanlm}
if python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || \
   .venv/bin/python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    dev=cuda; args=(--batch-size 32 --seq-len 512 --steps 20)
else
    dev=cpu; args=(--batch-size 8 --seq-len 128 --steps 3)
fi
mkdir -p "bench/$dev"
for attention in mha mhe_mul; do
    "$LEANLM" bench --size base --attention "$attention" --device "$dev" "${args[@]}" --out "bench/$dev/base_$attention.json"
done
