"""Benchmark: ``mwb preprocess`` throughput and GPT sample-index build time (not a test).

    python benchmarks/bench_preprocess.py                 # 200 MB synthetic JSONL, workers 1 and 2
    python benchmarks/bench_preprocess.py --size-mb 20    # smaller
    python benchmarks/bench_preprocess.py --skip-synthetic --workers 1 2 4

Rows: the bundled corpus (2.8 MB JSONL, gz-compressed) and a synthetic JSONL made of the corpus's
documents in random order, each at every ``--workers`` count, with and without ``--split-sentences``
(bundled only); then ``build_gpt_indices`` over 100M tokens of synthetic document lengths at two sequence
lengths. MB/s counts input bytes (uncompressed JSON lines). Output goes to a temporary directory that is
removed afterwards.
"""
from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import tempfile
import time

import numpy as np


def make_synthetic(path: str, size_mb: float, seed: int = 0) -> int:
    from mwb.core.data.bundled import corpus_file

    with gzip.open(corpus_file(), "rb") as f:
        lines = [line for line in f if line.strip()]
    rng = random.Random(seed)
    target, written = int(size_mb * 1e6), 0
    with open(path, "wb") as out:
        while written < target:
            line = lines[rng.randrange(len(lines))]
            out.write(line)
            written += len(line)
    return written


def bench_preprocess(rows, label, path, workers, tok, tmp, split=False):
    from mwb.core.data.preprocess import preprocess

    for w in workers:
        t = time.perf_counter()
        r = preprocess([path], os.path.join(tmp, f"out-{w}"), tok, workers=w, append_eod=True,
                       split_sentences=split, progress=False)
        wall = time.perf_counter() - t
        rows.append((f"{label}{' --split-sentences' if split else ''}", w, f"{r.bytes / 1e6:.1f} MB",
                     f"{r.bytes / 1e6 / wall:.2f} MB/s", f"{r.documents / wall:,.0f} docs/s",
                     f"{r.tokens / wall / 1e6:.2f} Mtok/s", f"{wall:.1f} s"))
        print(" | ".join(map(str, rows[-1])), flush=True)


def bench_index(rows, total_tokens: int, seq_lengths, seed: int = 0):
    from mwb.core.data.gpt import build_gpt_indices

    rng = np.random.RandomState(seed)
    lengths = np.maximum(1, rng.lognormal(mean=6.0, sigma=1.0, size=int(total_tokens / 650))).astype(np.int64)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), total_tokens) + 1]
    for seq in seq_lengths:
        n = int(lengths.sum()) // seq  # about one epoch of samples
        t = time.perf_counter()
        _, sample_index, _ = build_gpt_indices(lengths, np.arange(len(lengths)), seq, n, seed)
        wall = time.perf_counter() - t
        rows.append((f"GPT sample index, {lengths.sum() / 1e6:.0f}M tokens, {len(lengths):,} docs, seq {seq}", "-",
                     f"{len(sample_index) - 1:,} samples", "-", "-", "-", f"{wall:.2f} s"))
        print(" | ".join(map(str, rows[-1])), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=200.0, help="synthetic JSONL size (default 200)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--index-tokens", type=float, default=100e6, help="tokens for the sample-index benchmark")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--tokenizer", default=None, help="default: the bundled byte-level BPE tokenizer")
    args = ap.parse_args()

    from mwb.core.data.bundled import corpus_file, tokenizer_file

    tok = args.tokenizer or tokenizer_file()
    rows = []
    tmp = tempfile.mkdtemp(prefix="mwb-bench-")
    try:
        print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}", flush=True)
        bench_preprocess(rows, "bundled corpus", corpus_file(), args.workers, tok, tmp)
        bench_preprocess(rows, "bundled corpus", corpus_file(), args.workers[:1], tok, tmp, split=True)
        if not args.skip_synthetic:
            path = os.path.join(tmp, "synthetic.jsonl")
            t = time.perf_counter()
            size = make_synthetic(path, args.size_mb)
            print(f"(wrote {size / 1e6:.0f} MB synthetic JSONL in {time.perf_counter() - t:.1f} s)", flush=True)
            bench_preprocess(rows, f"synthetic JSONL {size / 1e6:.0f} MB", path, args.workers, tok, tmp)
        bench_index(rows, int(args.index_tokens), (1024, 128))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    head = ("input", "workers", "size", "throughput", "docs/s", "tokens/s", "wall")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    fmt = " | ".join(f"{{:{w}}}" for w in widths)
    print()
    print(fmt.format(*head))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(fmt.format(*map(str, r)))


if __name__ == "__main__":
    main()
