"""The GPU path, measured: one prepared script for a session that has a CUDA device (issue 24, item 5).

Parts, each reported on its own (a failure prints its traceback and the script goes on to the next):

1. the tests that need CUDA (``pytest`` on the files that skip without it): grouped MoE kernels, training on
   CUDA against the CPU (fp32, bf16, compiled blocks), activation memory against the planner;
2. the activation-memory table measured on the device (the CUDA branches of ``known_differences``);
3. MFU of a 1.3B GPT (24 × 2048, 16 heads, seq 2048, vocab 50,257) in bf16 at the largest micro-batch that
   fits, against the device's dense bf16 peak: the one measured here (best ``torch.mm`` of two 8192² bf16
   matrices) and the data-sheet figure (``--peak-tflops``, default 989 for H100/H200 SXM). The micro-batch
   is estimated from the peak memory of steps at micro-batches 1 and 2 (their difference = activations per
   sample), and lowered by an eighth until a step runs;
4. mwb with ``train.compile`` (each block through inductor) at that batch, compile time left out;
5. the same model in ``transformers`` (GPT2LMHeadModel, SDPA, bf16 autocast over fp32 weights, torch's
   fused AdamW: what HF's Trainer runs by default) at the same micro-batch (halved if it does not fit);
6. fp8 through transformer-engine if it imports; otherwise torch's own fp8 GEMM (``torch._scaled_mm``,
   e4m3 with per-tensor scales) at the model's MLP shape, against bf16 ``torch.mm`` at the same shape:
   what an fp8 path could gain on the matmuls. mwb has no fp8 training path.

Model FLOPs per step as in bench_train_throughput.py: B·s·3·(2·N_matmul + 4·L·s·a·d + 2·h·V_pad).
Prints markdown for docs/benchmarks.md with the date and the device. ``--device cpu --shape small`` runs the
same code on CPU as a smoke test (no peak, tests or memory search).

    python benchmarks/gpu_mfu.py                                 # everything, ~5 min on an H200
    python benchmarks/gpu_mfu.py --skip-tests --steps 5
    python benchmarks/gpu_mfu.py --device cpu --shape small --seq 64 --batch 2 --steps 1 --warmup 1
"""
from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import os
import statistics
import subprocess
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from bench_train_throughput import HFStepper, alternate, build, run_config, step_flops  # noqa: E402

CUDA_TESTS = ["tests/core/moe/test_moe_cuda.py", "tests/core/training/test_cuda_training.py",
              "tests/core/plan/test_activation_measure_cuda.py"]
T0 = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - T0


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timer_for(device: str):
    def timed(fn) -> float:
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - t0
    return timed


def part(title: str, fn, *args):
    """Run one part; a failure prints its traceback and returns None, so the other parts still report."""
    print(f"\n## {title} (at {elapsed():.0f} s)\n", flush=True)
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a benchmark part reports its own failure and the rest go on
        traceback.print_exc(limit=6)
        print(f"(part failed: {title})", flush=True)
        return None
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def cuda_tests(args) -> None:
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", *CUDA_TESTS],
                       cwd=ROOT, capture_output=True, text=True, timeout=args.tests_timeout)
    lines = (r.stdout + r.stderr).strip().splitlines()
    print("```\n" + "\n".join(lines[-40:]) + "\n```", flush=True)


def activation_table(args) -> None:
    from tests.core.plan.test_activation_measure_cuda import cuda_rows
    from mwb.core.plan.measure import format_table
    print(format_table(cuda_rows()), flush=True)


def mm_tflops(m: int, k: int, n: int, dtype=torch.bfloat16, reps: int = 20) -> float:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return 2 * m * k * n / _best(lambda: torch.mm(a, b), reps) / 1e12


def _best(fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def step_ok(args, batch: int):
    """A trainer at ``batch`` after one step, or None when that step runs out of memory."""
    try:
        trainer = build(args.shape, None, batch, args.seq, "bf16", False, device=args.device)
        trainer.train_step()
        sync(args.device)
        return trainer
    except torch.OutOfMemoryError:
        pass
    gc.collect()
    torch.cuda.empty_cache()
    return None


def _peak_of_step(args, batch: int):
    """Peak bytes allocated over two steps at ``batch`` (the trainer is freed after), or None out of memory."""
    torch.cuda.reset_peak_memory_stats()
    trainer = step_ok(args, batch)
    if trainer is None:
        return None
    trainer.train_step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def largest_batch(args) -> tuple[int, str]:
    """(micro-batch, how it was found): the activation bytes per sample are the difference of the peak
    memory at micro-batches 2 and 1 (what does not grow with the batch cancels out); from the estimate
    (at most ``--max-batch``) the micro-batch is lowered by an eighth until a step runs."""
    if args.batch or args.device != "cuda":
        return args.batch or 1, "given"
    peaks = {}
    for b in (1, 2):
        peaks[b] = _peak_of_step(args, b)
        if peaks[b] is None:
            raise RuntimeError(f"the model does not fit at micro-batch {b}")
    total = torch.cuda.get_device_properties(0).total_memory
    per_sample = max(peaks[2] - peaks[1], 1)
    fixed = peaks[1] - per_sample
    est = int((0.92 * total - fixed) // per_sample)
    b = max(1, min(est, args.max_batch))
    note = (f"peak {peaks[1] / 2**30:.1f} GiB at micro-batch 1 and {peaks[2] / 2**30:.1f} GiB at 2: "
            f"{per_sample / 2**30:.2f} GiB per sample over {fixed / 2**30:.1f} GiB that does not grow, "
            f"{total / 2**30:.0f} GiB device → estimate {est}")
    while b >= 1:
        trainer = step_ok(args, b)
        if trainer is not None:
            args.trainer = trainer  # reused for the timed run: a 1.3B build is seconds of host-side init
            return b, note
        note += f"; {b} ran out of memory"
        b = min(b - 1, b * 7 // 8)
    raise RuntimeError("no micro-batch fits")


def measure(args, name: str, stepper, batch: int, flops: float, peak: float) -> dict:
    ts = alternate({name: stepper}, args.steps, args.warmup, timer_for(args.device))[name]
    best, med = min(ts), statistics.median(ts)
    tf = flops / best / 1e12
    row = {"run": name, "batch": batch, "best": best, "median": med, "tok_s": batch * args.seq / best, "tflops": tf,
           "mfu": tf / peak if peak else float("nan"), "mfu_sheet": tf / args.peak_tflops}
    print(f"{name}: best {best:.3f} s, median {med:.3f} s, {row['tok_s']:,.0f} tok/s, {tf:.0f} TFLOP/s", flush=True)
    return row


def mwb_rows(args, batch: int, peak: float) -> list:
    rows = []
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = getattr(args, "trainer", None) or build(args.shape, None, batch, args.seq, "bf16", False,
                                                      device=args.device)
    args.trainer = None
    flops = step_flops(trainer.cfg)
    args.flops = flops
    rows.append(measure(args, "mwb bf16", trainer.train_step, batch, flops, peak))
    if args.device == "cuda":
        rows[-1]["mem"] = torch.cuda.max_memory_allocated() / 2**30
    del trainer
    if args.skip_compile or elapsed() > args.budget_s * 0.6:
        print("mwb compiled: skipped" + ("" if args.skip_compile else f" (time budget, at {elapsed():.0f} s)"))
        return rows
    torch._dynamo.reset()
    t0 = time.perf_counter()
    trainer = build(args.shape, None, batch, args.seq, "bf16", True, device=args.device)
    trainer.train_step()
    sync(args.device)
    print(f"compile (first step) {time.perf_counter() - t0:.0f} s", flush=True)
    rows.append(measure(args, "mwb bf16, compiled blocks", trainer.train_step, batch, flops, peak))
    return rows


def hf_rows(args, batch: int, peak: float) -> list:
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    for b in (batch, batch // 2, batch // 4):
        if b < 1:
            break
        try:
            cfg, data = run_config(args.shape, None, b, args.seq, "bf16", False)
            hf = HFStepper(cfg, data, "bf16", device=args.device, fused=args.device == "cuda")
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            row = measure(args, "HF bf16 autocast, fused AdamW", hf.step, b, step_flops(cfg), peak)
            if args.device == "cuda":
                row["mem"] = torch.cuda.max_memory_allocated() / 2**30
            return [row]
        except torch.OutOfMemoryError:
            print(f"HF: micro-batch {b} ran out of memory", flush=True)
            gc.collect()
            torch.cuda.empty_cache()
    return []


def fp8_rows(args) -> None:
    h, ffn, tokens = 2048, 8192, args.seq * 8
    try:
        importlib.import_module("transformer_engine.pytorch")
        print("transformer-engine imports: its fp8 path is not wired into mwb; GEMM rows below use torch")
    except Exception as e:  # noqa: BLE001 - absent or no matching build on this image
        print(f"transformer-engine: not available ({type(e).__name__}: {str(e)[:100]})")
    bf16 = mm_tflops(tokens, h, ffn)
    a = torch.randn(tokens, h, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(ffn, h, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
    one = torch.ones((), device="cuda")
    best = _best(lambda: torch._scaled_mm(a, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), 20)
    fp8 = 2 * tokens * h * ffn / best / 1e12
    print(f"\n| GEMM {tokens}×{h}→{ffn} (the 1.3B model's first MLP matmul) | TFLOP/s |\n| --- | ---: |\n"
          f"| bf16 torch.mm | {bf16:.0f} |\n| fp8 e4m3 torch._scaled_mm, bf16 out | {fp8:.0f} ({fp8 / bf16:.2f}×) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="gpt-1.3b")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=None, help="micro-batch (default: the largest that fits)")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="data-sheet dense bf16 peak")
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip the compiled run past 60%% of this")
    ap.add_argument("--tests-timeout", type=float, default=180.0)
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--skip-hf", action="store_true")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("gpu_mfu.py needs a CUDA device (or --device cpu for a smoke run)")
    import transformers
    name = torch.cuda.get_device_name() if cuda else "CPU"
    print(f"# GPU path, {datetime.date.today()}, {name}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}")
    if cuda and not args.skip_tests:
        part("CUDA tests", cuda_tests, args)
    if cuda:
        part("Activation memory on the device, bf16, TP1", activation_table, args)
    peak = part("bf16 matmul peak", lambda: mm_tflops(8192, 8192, 8192)) if cuda else None
    if peak:
        print(f"torch.mm 8192² bf16: {peak:.0f} TFLOP/s (data sheet {args.peak_tflops:g})")
    found = part("Largest micro-batch", largest_batch, args)
    if not found:
        return
    batch, note = found
    print(f"micro-batch {batch} ({note})", flush=True)
    rows = part("mwb", mwb_rows, args, batch, peak) or []
    if not args.skip_hf:
        rows += part("Hugging Face", hf_rows, args, batch, peak) or []
    if rows:
        print(f"\n## Table (at {elapsed():.0f} s)\n\nshape {args.shape}, seq {args.seq}; model FLOPs/step at "
              f"micro-batch {batch}: {getattr(args, 'flops', float('nan')):.3e} = B·s·3·(2·N_matmul + 4·L·s·a·d + "
              f"2·h·V_pad); measured peak {peak or float('nan'):.0f} TFLOP/s, data sheet {args.peak_tflops:g}\n")
        print("| run | micro-batch | best s/step | median s/step | tokens/s | TFLOP/s | MFU (measured peak) | "
              "MFU (data sheet) | peak memory GiB |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['run']} | {r['batch']} | {r['best']:.3f} | {r['median']:.3f} | {r['tok_s']:,.0f} | "
                  f"{r['tflops']:.0f} | {r['mfu']:.0%} | {r['mfu_sheet']:.0%} | {r.get('mem', float('nan')):.1f} |")
        if cuda:
            print(f"\nmax memory allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    if cuda:
        part("fp8", fp8_rows, args)
    print(f"\ndone in {elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
