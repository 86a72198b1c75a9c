"""The GPU path, measured: one prepared script for a session that has a CUDA device (issue 24, item 5).

1. the tests that need CUDA (``pytest`` on the files that skip without it);
2. MFU of a 1.3B GPT (24 × 2048, 16 heads, seq 2048, vocab 50,257) in bf16 at the largest micro-batch that
   fits (tried 1, 2, 4, 8, 16 until out of memory), against the device's dense bf16 peak: both the peak
   measured here (best ``torch.mm`` of two 8192² bf16 matrices) and the data-sheet figure (``--peak-tflops``,
   default 989 for H100/H200 SXM);
3. the same model in ``transformers`` (GPT2LMHeadModel, bf16 autocast over fp32 weights, SDPA) at the same
   batch, alternating steps with mwb;
4. fp8 through transformer-engine, if it imports (reported as absent otherwise: mwb has no fp8 path yet, so
   this row measures TE's own ``te.Linear`` GEMM throughput at the model's MLP shape).

Model FLOPs per step as in bench_train_throughput.py: B·s·3·(2·N_matmul + 4·L·s·a·d + 2·h·V_pad).
Prints markdown to paste into docs/benchmarks.md with the date and the device.

    python benchmarks/gpu_mfu.py                       # all four parts
    python benchmarks/gpu_mfu.py --skip-tests --steps 5
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bench_train_throughput import HFStepper, alternate, build, step_flops  # noqa: E402

CUDA_TESTS = ["tests/core/moe/test_moe_cuda.py"]


def cuda_peak_tflops(n: int = 8192, reps: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, b)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e12


def timed_cuda(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def largest_batch(args) -> tuple:
    """The largest micro-batch of 1, 2, 4, ... that trains one step without running out of memory."""
    best = None
    for b in (1, 2, 4, 8, 16):
        try:
            trainer = build("gpt-1.3b", None, b, args.seq, "bf16", args.compile, device="cuda")
            trainer.train_step()
            torch.cuda.synchronize()
            best = b
            del trainer
        except torch.OutOfMemoryError:
            break
        finally:
            torch.cuda.empty_cache()
    return best


def fp8_row(args) -> str:
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling
    except Exception as e:  # not installed or no matching CUDA build
        return f"| fp8 (transformer-engine) | not available: {type(e).__name__}: {str(e)[:80]} |"
    h, ffn, tokens = 2048, 8192, args.seq * 4
    lin = te.Linear(h, ffn, bias=False, params_dtype=torch.bfloat16).cuda()
    x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step():
        with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling()):
            lin(x).sum().backward()
    step()
    best = min(timed_cuda(step) for _ in range(10))
    return f"| fp8 te.Linear {tokens}×{h}→{ffn}, fwd+bwd | {6 * tokens * h * ffn / best / 1e12:.0f} TFLOP/s |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="data-sheet dense bf16 peak")
    ap.add_argument("--compile", action="store_true", help="mwb with train.compile")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-hf", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_mfu.py needs a CUDA device")
    name = torch.cuda.get_device_name()
    print(f"# GPU path, {datetime.date.today()}, {name}, torch {torch.__version__}\n")
    if not args.skip_tests:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", *CUDA_TESTS], cwd=root, capture_output=True,
                           text=True)
        print("CUDA tests: " + (r.stdout.strip().splitlines() or ["(no output)"])[-1] + "\n")
    peak = cuda_peak_tflops()
    b = largest_batch(args)
    if b is None:
        sys.exit("the 1.3B model does not fit at micro-batch 1")
    trainer = build("gpt-1.3b", None, b, args.seq, "bf16", args.compile, device="cuda")
    steppers = {"mwb bf16" + (" compiled" if args.compile else ""): trainer.train_step}
    if not args.skip_hf:
        steppers["HF bf16 autocast"] = HFStepper(trainer, "bf16", device="cuda").step
    times = alternate(steppers, args.steps, args.warmup, timed_cuda)
    flops = step_flops(trainer)
    print(f"matmul peak measured (torch.mm 8192² bf16) {peak:.0f} TFLOP/s; data sheet {args.peak_tflops:g}; "
          f"model FLOPs/step {flops:.3e} = B·s·3·(2·N_matmul + 4·L·s·a·d + 2·h·V_pad); micro-batch {b} "
          f"(largest that fits), seq {args.seq}\n")
    print("| run | best s/step | median s/step | tokens/s | TFLOP/s | MFU (measured peak) | MFU (data sheet) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        tf = flops / best / 1e12
        print(f"| {k} | {best:.3f} | {med:.3f} | {b * args.seq / best:,.0f} | {tf:.0f} | {tf / peak:.0%} | "
              f"{tf / args.peak_tflops:.0%} |")
    print(f"\nmax memory allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB\n")
    print(fp8_row(args))


if __name__ == "__main__":
    main()
