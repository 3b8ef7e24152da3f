#!/usr/bin/env bash
# The measurements recorded in docs/benchmarks.md (`leanlm bench`): batch build and step time apart,
# tokens/s, peak memory and MFU (on a GPU, against the peak of the precision used) for BERT-base with MHA
# and with MHE-MUL (MLM, 32 x 512) and ch. 4's 500M Standard and Approximate decoders (causal LM,
# 8 x 2048), bf16. Results go to bench/<device>/*.json.
#   bash scripts/bench.sh            # full sizes on CUDA; on a CPU, the host's batch building at full size
#                                    # and the step at small sizes
set -euo pipefail
cd "$(dirname "$0")/.."
LEANLM=${LEANLM:-.venv/bin/leanlm}
if python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || \
   .venv/bin/python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    mkdir -p bench/cuda
    for config in bert_base_mha bert_base_mhe_mul ch4_standard_500m ch4_approximate_500m; do
        "$LEANLM" bench --config "$config" --dtype bf16 --steps 20 --warmup 5 --out "bench/cuda/$config.json"
        "$LEANLM" bench --config "$config" --dtype bf16 --steps 20 --warmup 5 --compile --out "bench/cuda/${config}_compiled.json"
    done
else
    mkdir -p bench/cpu
    "$LEANLM" bench --config bert_base_mha --batch-size 128 --build-only --steps 10 --warmup 2 --out bench/cpu/build_mlm_128x512.json
    "$LEANLM" bench --config ch4_standard_500m --batch-size 16 --build-only --steps 10 --warmup 2 --out bench/cpu/build_causal_16x2048.json
    # ours against the transformers twins, interleaved in one process (docs/benchmarks.md)
    OMP_NUM_THREADS=1 "$LEANLM" bench --parity all --steps 8 --warmup 1 --device cpu --out bench/cpu/parity.json
    for prefetch in 0 2; do
        "$LEANLM" bench --size tiny --batch-size 128 --seq-len 128 --steps 8 --warmup 2 --prefetch "$prefetch" \
            --out "bench/cpu/tiny_prefetch$prefetch.json"
    done
fi
