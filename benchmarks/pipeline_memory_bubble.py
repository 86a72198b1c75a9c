"""Pipeline schedules compared on real ranks: activation memory (micro-batches in flight) and bubble.

For each layout the pipeline runs one training step of a small GPT on ``pp`` local gloo ranks, every layer
given an artificial cost (``--layer-ms`` forward, twice that backward) so that the schedule, not the
2-core CPU, decides the timing. Reported per schedule:

  in flight   peak number of (chunk, micro-batch) activation sets alive per stage, counted by tagging the
              tensors autograd saves (stage 0 first); model = the same schedule simulated on paper
  bubble      idle / busy time per stage (mean over stages), measured from the time spent inside forward
              and backward computations vs the wall time of the step; theory = (pp-1)/m, or
              (pp-1)/(vpp·m) for interleaved 1F1B

    python benchmarks/pipeline_memory_bubble.py
    python benchmarks/pipeline_memory_bubble.py --microbatches 16 --layer-ms 8
"""
from __future__ import annotations

import argparse

from mwb.core.pipeline.measure import Setup, run_measurement


def layouts(m: int, layers: int, layer_s: float) -> list[Setup]:
    rows = []
    for pp, vpp, order in [(2, 1, "1f1b"), (2, 1, "gpipe"), (2, 2, "1f1b"),
                           (4, 1, "1f1b"), (4, 1, "gpipe"), (4, 2, "1f1b")]:
        rows.append(Setup(pp, vpp, m, order, num_layers=layers, layer_fwd_s=layer_s))
    return rows


def name(s: Setup) -> str:
    return "GPipe" if s.order == "gpipe" else ("interleaved 1F1B" if s.vpp > 1 else "1F1B")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--layer-ms", type=float, default=12.0, help="artificial forward cost per layer (ms)")
    args = ap.parse_args()
    res = run_measurement(layouts(args.microbatches, args.layers, args.layer_ms / 1000))
    head = ("| schedule | pp | vpp | m | in flight per stage (measured) | model | bubble measured | "
            "model | theory | step wall s |")
    print(head)
    print("|" + "---|" * 10)
    for r in res:
        s = r["setup"]
        print(f"| {name(s)} | {s.pp} | {s.vpp} | {s.microbatches} | {r['in_flight']} | {r['in_flight_model']} | "
              f"{r['bubble']:.3f} | {r['bubble_model']:.3f} | {r['bubble_theory']:.3f} | {r['wall_s']:.3f} |")
    print("\nin flight counts (chunk, micro-batch) activation sets; with vpp chunks each is 1/vpp of a stage's "
          "activations.\nbubble = idle/busy per stage, mean over stages; theory (pp-1)/(vpp·m).")


if __name__ == "__main__":
    main()
