"""Peak memory of packing a ch. 2 hash run's corpus, streamed (codebook_streams) and in memory (before).

    python scripts/bench_codebook_memory.py [--scales 1 8] [--runs ch2_hashformers-md5_proj ...]

The corpus at scale k is the profile's training split written k times over (validation as it is), so the
tokens grow k-fold while the distinct words stay (the codebook's share, which grows with distinct words
and not with tokens, is reported beside). Every measurement is a fresh process: ``ru_maxrss`` after the
imports and after the work; the difference is the packing's peak. ``streamed build`` builds the streams
and codebook into an empty cache, ``streamed job`` is the next job that maps them (every pretraining job
but the first), ``in memory`` is the packing this replaced (texts, per-document ids, pack_sequences).
Needs the profile's data (``leanlm data fetch/corpus/tokenizer --params params/smoke.yaml``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, run_id, corpus, params = sys.argv[1:5]
from leanlm.config import load_config
from leanlm.runs import get_run, pretrain_settings
from leanlm.hashing.codebook_streams import codebook_corpus
from leanlm.hashing.inputs import _model_config, _tokenizer_for, corpus_token_counts
from leanlm.training.run_tokenizer import subword_tokenizer
from leanlm.hashing import HashCodebook
from leanlm.modeling.hash_features import codebook_settings
from leanlm.training.objectives import pack_sequences
from leanlm.training.text_batches import read_documents, tokenize_documents
config = load_config(params)
run = get_run(config, run_id)
seq_len = pretrain_settings(config, run)["seq_len"]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
corpus = Path(corpus)
if mode == "in_memory":  # the packing before the streams (tests/test_codebook_streams.py's reference)
    texts = read_documents(corpus / "train.jsonl")
    model_config = _model_config(run)
    counts = None
    if codebook_settings(model_config)["hash"] == "lsh":
        counts = corpus_token_counts(texts, subword_tokenizer(config, run) if run.tokenizer == "hash_subword" else None)
    tok = _tokenizer_for(run, HashCodebook.for_model(model_config, token_counts=counts), config)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    train = pack_sequences(tokenize_documents(tok, texts, "train"), seq_len, cls, sep)
    valid = pack_sequences(tokenize_documents(tok, read_documents(corpus / "validation.jsonl"), "v"), seq_len, cls, sep)
    rows = len(tok.codebook)
else:
    packed = codebook_corpus(config, run, corpus, seq_len)
    tok, train, valid = packed.tokenizer, packed.train, packed.validation
    rows = len(tok.codebook)
    train[[0, len(train) - 1]]  # a batch reads rows
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"mode": mode, "run": run_id, "rows": len(train), "seq_len": seq_len, "codebook_rows": rows,
                  "base_mib": base / 1024, "peak_mib": peak / 1024, "packing_mib": (peak - base) / 1024,
                  "seconds": time.perf_counter() - started}))
"""


def make_corpus(source: Path, target: Path, scale: int, fresh_words: bool = False) -> int:
    """The training split ``scale`` times over; with ``fresh_words`` copy i > 0 suffixes every word with
    ``q<i>``, so the distinct words grow with the tokens (the worst case for the codebook)."""
    import re

    target.mkdir(parents=True, exist_ok=True)
    with open(source / "train.jsonl", "rb") as handle:
        train = handle.read()
    with open(target / "train.jsonl", "wb") as out:
        for copy in range(scale):
            if copy and fresh_words:
                rows = (json.loads(line) for line in train.decode("utf-8").splitlines() if line.strip())
                out.write("".join(json.dumps({"text": re.sub(r"(\w+)", rf"\1q{copy}", row["text"])}) + "\n"
                                  for row in rows).encode("utf-8"))
            else:
                out.write(train)
    shutil.copyfile(source / "validation.jsonl", target / "validation.jsonl")
    return sum(len(json.loads(line)["text"].split()) for line in open(target / "train.jsonl", encoding="utf-8"))


def measure(mode: str, run_id: str, corpus: Path, params: str, cache: Path) -> dict:
    env = {**os.environ, "LEANLM_CACHE": str(cache), "LEANLM_FORKSERVER": "off"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, run_id, str(corpus), params], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{mode} {run_id} at {corpus} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params/smoke.yaml")
    parser.add_argument("--corpus", default="data/smoke/corpus", help="the profile's corpus splits")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--runs", nargs="+", default=["ch2_hashformers-md5_proj", "ch2_hashformers-lsh_proj",
                                                      "ch2_subword-lsh_proj"])
    parser.add_argument("--modes", nargs="+", default=["streamed", "in_memory"])
    parser.add_argument("--fresh-words", action="store_true",
                        help="new words in every copy: distinct words grow with the corpus")
    args = parser.parse_args()
    print("| run | corpus | words (train) | mode | rows | codebook rows | peak RSS over imports (MiB) | s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="leanlm-bench-") as tmp:
        for scale in args.scales:
            corpus = Path(tmp) / f"x{scale}"
            words = make_corpus(Path(args.corpus), corpus, scale, args.fresh_words)
            for run_id in args.runs:
                cache = Path(tmp) / f"cache-x{scale}-{run_id}"
                results = []
                for mode in args.modes:
                    if mode == "streamed":
                        results.append(("streamed build", measure("streamed", run_id, corpus, args.params, cache)))
                        results.append(("streamed job", measure("streamed", run_id, corpus, args.params, cache)))
                    else:
                        results.append(("in memory", measure(mode, run_id, corpus, args.params, cache)))
                for label, r in results:
                    print(f"| {run_id} | {scale}x{' fresh' if args.fresh_words else ''} | {words:,} | {label} | {r['rows']:,} | {r['codebook_rows']:,} | "
                          f"{r['packing_mib']:.0f} | {r['seconds']:.1f} |", flush=True)
                shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
