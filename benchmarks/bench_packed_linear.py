"""One linear layer's product on CPU at the shapes of a decoding step: ``F.linear`` (MKL ``sgemm``), oneDNN's
inner product on the plain weight, oneDNN on a weight packed once, and
:class:`~mwb.core.models.packed_linear.PackedGemm` (what ``mwb serve/generate/eval`` use on CPU: the packed
product, or ``F.linear`` below ``MIN_PACKED_MACS``). Times are medians of ``--repeats`` timed batches of
calls; every ratio is to ``F.linear`` in the same run. The largest difference of the packed product to
``F.linear`` is printed too.

    python benchmarks/bench_packed_linear.py                   # SmolLM2-135M's shapes, 16 and 1 rows
    python benchmarks/bench_packed_linear.py --hidden 2048 --ffn 8192 --vocab 50304 --rows 16
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from mwb.core.models.packed_linear import MIN_PACKED_MACS, PackedGemm, packing_available


def timed(fn, calls: int, repeats: int) -> float:
    """Median milliseconds per call over ``repeats`` batches of ``calls`` calls (after a warm-up batch)."""
    for _ in range(calls):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--kv", type=int, default=192, help="key/value projection width (kv heads × head dim)")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--rows", default="16,1", help="comma-separated row counts (sequences decoded together)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not packing_available(torch.float32):
        raise SystemExit("oneDNN's packed linear cannot run with this torch build on this CPU")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shapes = [("q/o projection", args.hidden, args.hidden), ("k/v projection", args.hidden, args.kv),
              ("MLP up/gate", args.hidden, args.ffn), ("MLP down", args.ffn, args.hidden),
              ("output head", args.hidden, args.vocab)]
    print(f"PackedGemm takes F.linear below {MIN_PACKED_MACS} multiply-adds (rows × in × out)\n")
    print("| rows | layer (in → out) | F.linear ms | oneDNN, plain weight ms | oneDNN, packed ms | "
          "packed speed-up | PackedGemm ms | PackedGemm speed-up | max abs difference |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for rows in (int(r) for r in args.rows.split(",")):
            for name, k, n in shapes:
                x, w = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g) / k ** 0.5
                calls = max(3, min(200, int(2e8 // (rows * k * n + 1))))
                gemm = PackedGemm(w)
                base = timed(lambda: F.linear(x, w), calls, args.repeats)
                plain = timed(lambda: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""), calls,
                              args.repeats)
                packed = timed(lambda: torch.ops.mkldnn._linear_pointwise(x, gemm.packed, None, "none", [], ""),
                               calls, args.repeats)
                chosen = timed(lambda: gemm(x, w, None), calls, args.repeats)
                diff = (torch.ops.mkldnn._linear_pointwise(x, gemm.packed, None, "none", [], "")
                        - F.linear(x, w)).abs().max().item()
                print(f"| {rows} | {name} ({k} → {n}) | {base:.3f} | {plain:.3f} | {packed:.3f} | "
                      f"{base / packed:.2f}× | {chosen:.3f} | {base / chosen:.2f}× | {diff:.2e} |", flush=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
