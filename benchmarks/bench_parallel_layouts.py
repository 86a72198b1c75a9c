"""Training tokens/s of parallel layouts on this 2-core CPU: TP2, TP2+SP, DP2, PP2 on 2 ranks × 1 thread
against 1 rank × 2 threads (and 1 rank × 1 thread for scale).

Every run is the real user path, ``mwb pretrain gpt --data synthetic`` in a subprocess (``--nproc 2``
starts the ranks through torch's elastic launcher, which gives each of them 1 thread); tokens/s are the
per-step values of ``OUT/metrics.jsonl`` (rank 0's step time over the global batch), the first step of each
run left out as warm-up. All layouts train the same model on the same global batch (so each step is the
same work), and the runs go round-robin over the layouts for ``--rounds`` rounds, so that load from other
processes on the machine is spread over all of them. The table gives each layout's fastest and median step
and its ratio to 1 rank × 2 threads, all measured in this run.

    python benchmarks/bench_parallel_layouts.py              # 4 layers × 256, 3 rounds of 8 steps
    python benchmarks/bench_parallel_layouts.py --quick      # 2 layers × 128, 1 round of 5 steps
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LAYOUTS = [  # name, --nproc, extra flags, OMP_NUM_THREADS for a single rank
    ("1 rank × 2 threads", 1, [], "2"),
    ("1 rank × 1 thread", 1, [], "1"),
    ("TP2 (2 ranks × 1 thread)", 2, ["--tp", "2"], None),
    ("TP2+SP (2 ranks × 1 thread)", 2, ["--tp", "2", "--sp"], None),
    ("DP2 (2 ranks × 1 thread)", 2, [], None),
    ("PP2 (2 ranks × 1 thread)", 2, ["--pp", "2"], None),
]
BASELINE = LAYOUTS[0][0]


def pipeline_available() -> bool:
    try:
        from mwb.core.pipeline.schedules import get_pipeline_schedule  # noqa: F401
    except ImportError:
        return False
    return True


def run_layout(nproc: int, flags: list, threads, model: dict, args, workdir: str) -> list[float]:
    """tokens/s of each step after the first, from one ``mwb pretrain gpt`` run."""
    out = tempfile.mkdtemp(dir=workdir)
    cmd = [sys.executable, "-m", "mwb", "pretrain", "gpt", "--data", "synthetic", "--nproc", str(nproc),
           "--steps", str(args.steps + 1), "--micro-batch-size", str(args.micro_batch_size),
           "--global-batch-size", str(args.global_batch_size), "--seq-length", str(model["seq"]),
           "--precision", args.precision, "--eval-interval", "0", "--eval-steps", "1", "--out", out,
           "--set", f"model.num_layers={model['layers']}", "--set", f"model.hidden_size={model['hidden']}",
           "--set", f"model.num_attention_heads={model['heads']}", "--set", "model.dropout=0",
           "--set", f"model.max_position_embeddings={model['seq']}", "--set", "logging.tensorboard=false",
           "--set", "logging.plot=false", "--set", "logging.progress=false", *flags]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    steps = [r for r in recs if "split" not in r and "tokens_per_s" in r]
    return [r["tokens_per_s"] for r in steps if r["step"] > 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smaller model, 1 round of 5 steps (smoke run)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None, help="measured steps per run (one more is run)")
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--global-batch-size", type=int, default=8)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.steps = args.steps or (5 if args.quick else 8)
    model = ({"layers": 2, "hidden": 128, "heads": 4, "seq": 128} if args.quick else
             {"layers": 4, "hidden": 256, "heads": 4, "seq": 128})
    layouts, notes = list(LAYOUTS), []
    if not pipeline_available():
        layouts = [lay for lay in layouts if "--pp" not in lay[2]]
        notes.append("PP2 skipped: mwb.core.pipeline is not available in this tree")
    results: dict = {name: [] for name, *_ in layouts}
    with tempfile.TemporaryDirectory(prefix="mwb-bench-layouts-") as workdir:
        for _ in range(args.rounds):
            for name, nproc, flags, threads in layouts:
                results[name] += run_layout(nproc, flags, threads, model, args, workdir)
    base_best, base_med = max(results[BASELINE]), statistics.median(results[BASELINE])
    tokens = args.global_batch_size * model["seq"]
    print(f"# mwb pretrain gpt --data synthetic: {model['layers']} layers × {model['hidden']} / {model['heads']} "
          f"heads, seq {model['seq']}, global batch {args.global_batch_size} ({tokens} tokens/step) in "
          f"micro-batches of {args.micro_batch_size}, {args.precision}; {args.rounds} round(s) × {args.steps} "
          f"measured steps per layout\n")
    print(f"| layout | best tok/s | median tok/s | best / {BASELINE} | median / {BASELINE} |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, *_ in layouts:
        v = results[name]
        print(f"| {name} | {max(v):.0f} | {statistics.median(v):.0f} | {max(v) / base_best:.2f} | "
              f"{statistics.median(v) / base_med:.2f} |")
    for n in notes:
        print(f"\n{n}")


if __name__ == "__main__":
    main()
