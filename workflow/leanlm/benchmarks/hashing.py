"""``python -m leanlm.benchmarks.hashing``: how fast hashing and hash-embedded pretraining steps are.

1. Hash bits for 10^5 distinct tokens (pseudo-words of 3-11 letters): MD5 (HMAC) and LSH (fitting
   the top-50K n-gram vocabulary is timed separately: it happens once per corpus); and LSH's Emb
   buckets (argmax over N = 50,000 circulant hyperplanes) per word, on 2,000 other pseudo-words.
2. One Shuffle+Random pretraining step (forward, backward, AdamW) of the smoke-size BERT
   (params/smoke.yaml: 2 layers, d 64, 4 heads of 16, FFN 256; batch 32 x 64 tokens) with the
   ``hash_proj`` embedding over the ``standard`` one, and the data-side gather of the bits per batch.

Prints one JSON object; ``--out FILE`` also writes it (atomically).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter

import numpy as np
import torch

from leanlm.hashing.codebook import HashCodebook
from leanlm.hashing.lsh import LSHHasher
from leanlm.hashing.md5 import MD5Hasher
from leanlm.io import write_json
from leanlm.modeling.config import ModelConfig
from leanlm.modeling.models import build_model
from leanlm.training.shuffle_random import shuffle_random

SMOKE_BERT = dict(vocab_size=4096, n_layers=2, d_model=64, n_heads=4, head_dim=16, d_ff=256,
                  max_position=128, type_vocab_size=2)


def pseudo_words(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct lowercase letter strings of 3-11 characters (deterministic)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: dict[str, None] = {}
    while len(words) < n:
        for length in rng.integers(3, 12, size=n):
            words["".join(rng.choice(letters, length))] = None
    return list(words)[:n]


def timed(fn, repeat: int = 3) -> float:
    """Best of ``repeat`` wall-clock runs, seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_hashing(n_tokens: int, bucket_words: int = 2000, n_buckets: int = 50_000) -> dict:
    tokens = pseudo_words(n_tokens)
    md5 = MD5Hasher()
    start = time.perf_counter()
    lsh = LSHHasher.fit(Counter(tokens))
    fit = time.perf_counter() - start

    def lsh_bits():
        lsh._planes = None  # include drawing the hyperplanes
        lsh.bits(tokens)

    # Buckets are computed once per distinct word (the codebook caches them): time per word.
    words = pseudo_words(bucket_words, seed=1)
    buckets_s = timed(lambda: lsh.buckets(words, n_buckets))
    return {"tokens": n_tokens, "md5_bits_s": timed(lambda: md5.bits(tokens)),
            "lsh_bits_s": timed(lsh_bits), "lsh_fit_ngrams_s": fit,
            "lsh_ngrams": len(lsh.vocabulary), "lsh_bucket_words": bucket_words,
            "lsh_buckets": n_buckets, "lsh_buckets_ms_per_word": 1e3 * buckets_s / bucket_words}


class StepRunner:
    """One S+R training step of the smoke BERT with ``embedding``, timed apart from the data side."""

    def __init__(self, embedding: str, codebook: HashCodebook):
        torch.manual_seed(0)
        options = {"hash": "md5"} if embedding != "standard" else {}
        config = ModelConfig(**SMOKE_BERT, embedding=embedding, embedding_options=options)
        self.embedding, self.codebook = embedding, codebook
        self.model = build_model(config, "shuffle_random")
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.names = self.model.encoder.embeddings.word_embeddings.features
        self.step_s: list[float] = []
        self.gather_s: list[float] = []

    def step(self, ids: torch.Tensor, labels: torch.Tensor, record: bool) -> None:
        start = time.perf_counter()
        features = self.codebook.features(ids, self.names)
        gathered = time.perf_counter()
        if self.embedding == "standard":
            ids = ids % SMOKE_BERT["vocab_size"]  # same shapes; what the ids mean does not matter here
        self.model(input_ids=ids, labels=labels, **features)["loss"].backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        done = time.perf_counter()
        if record:
            self.step_s.append(done - gathered)
            self.gather_s.append(gathered - start)

    def summary(self) -> dict:
        return {"step_ms": 1e3 * statistics.median(self.step_s),
                "feature_gather_ms": 1e3 * statistics.median(self.gather_s)}


def bench_pretraining(steps: int, batch: int = 32, seq_len: int = 64) -> dict:
    texts = [" ".join(pseudo_words(seq_len, seed=i)) for i in range(batch)]
    codebook = HashCodebook(MD5Hasher())
    rows = torch.tensor(codebook.encode(texts, max_len=seq_len, add_special_tokens=True))
    special = rows < codebook.n_special
    runners = [StepRunner("standard", codebook), StepRunner("hash_proj", codebook)]
    generator = torch.Generator().manual_seed(0)
    # Alternate the two models step by step, so a busy machine slows both alike.
    for step in range(steps + 3):  # 3 warm-up steps
        ids, labels = shuffle_random(rows, special, generator, vocab_or_sampler=codebook.random_ids)
        for runner in runners:
            runner.step(ids, labels, record=step >= 3)
    standard, proj = (r.summary() for r in runners)
    return {"batch": batch, "seq_len": seq_len, "threads": torch.get_num_threads(),
            "standard": standard, "hash_proj": proj,
            "step_time_ratio_hash_proj_over_standard": proj["step_ms"] / standard["step_ms"]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bucket-words", type=int, default=2000, help="words for the LSH bucket timing")
    parser.add_argument("--buckets", type=int, default=50_000, help="N of the LSH bucket timing")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"hashing": bench_hashing(args.tokens, args.bucket_words, args.buckets),
              "pretraining_step": bench_pretraining(args.steps)}
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
