"""bf16 against fp32 training on this CPU: mwb's full training step at two model sizes, and the matmul peak.

Each size builds two mwb trainers that differ only in ``train.precision``: fp32 (fp32 weights and
activations) and bf16 (bf16 weights and activations, fp32 main gradients and master weights in the
optimizer, as on GPUs). Steps alternate between them (fp32, bf16, fp32, ...), so machine load hits both
alike. The reference line is the ratio of the two dtypes' ``torch.mm`` 2048² throughput, the most a bf16
step could gain here; the rest of a step (attention, norms, optimizer, casts) gains less or nothing.

    python benchmarks/bench_precision.py             # 2 sizes, 8 measured steps each
    python benchmarks/bench_precision.py --quick     # smaller sizes, 4 steps: a smoke run
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from bench_train_throughput import matmul_peak_gflops, model_flops, mwb_trainer

# (layers, hidden, heads, seq, micro-batch, vocab)
SIZES = [(4, 512, 8, 256, 4, 8192), (6, 768, 12, 256, 4, 8192)]
QUICK_SIZES = [(2, 256, 4, 128, 2, 4096), (4, 384, 6, 128, 2, 8192)]


def bench_size(size, steps: int, warmup: int) -> dict:
    layers, h, a, s, b, vocab = size
    trainers = {p: mwb_trainer(size, p)[0] for p in ("fp32", "bf16")}
    times = {p: [] for p in trainers}
    losses = {p: None for p in trainers}
    for i in range(warmup + steps):
        for p, tr in trainers.items():
            t0 = time.perf_counter()
            res = tr.train_step()
            if i >= warmup:
                times[p].append(time.perf_counter() - t0)
            losses[p] = res.loss
    flops = model_flops(b, s, layers, h, vocab)
    return {"size": size, "flops": flops, "losses": losses,
            **{p: {"best": min(ts), "median": statistics.median(ts), "spread": max(ts) / min(ts)}
               for p, ts in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer steps (smoke run)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    steps = args.steps or (4 if args.quick else 8)
    peaks = {"fp32": [], "bf16": []}
    rows = []
    for sz in (QUICK_SIZES if args.quick else SIZES):
        for d, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):  # interleaved with the steps too
            peaks[d].append(matmul_peak_gflops(dt))
        rows.append(bench_size(sz, steps, 1 if args.quick else 2))
    peak = {d: max(v) for d, v in peaks.items()}
    print(f"# mwb training step, bf16 vs fp32, {args.threads} thread(s), {steps} measured steps per precision, "
          f"alternating\n")
    print(f"matmul peak (torch.mm 2048², best of {len(peaks['fp32'])} readings): fp32 {peak['fp32']:.0f} GFLOP/s, "
          f"bf16 {peak['bf16']:.0f} GFLOP/s, ratio bf16/fp32 {peak['bf16'] / peak['fp32']:.2f}\n")
    print("| layers × hidden / heads, seq × batch, vocab | fp32 step s | bf16 step s | bf16 speed-up best | "
          "bf16 speed-up median | fp32 GFLOP/s | bf16 GFLOP/s | loss fp32 / bf16 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        layers, h, a, s, b, vocab = r["size"]
        f, g = r["fp32"], r["bf16"]
        print(f"| {layers} × {h} / {a}, {s} × {b}, {vocab} | {f['best']:.3f} | {g['best']:.3f} | "
              f"{f['best'] / g['best']:.2f} | {f['median'] / g['median']:.2f} | {r['flops'] / f['best'] / 1e9:.1f} | "
              f"{r['flops'] / g['best'] / 1e9:.1f} | {r['losses']['fp32']:.3f} / {r['losses']['bf16']:.3f} |")
    worst = max(max(r["fp32"]["spread"], r["bf16"]["spread"]) for r in rows)
    print(f"\nstep times from the fastest step; slowest/fastest step of one precision and size: up to {worst:.2f}× "
          f"(machine load)")


if __name__ == "__main__":
    main()
