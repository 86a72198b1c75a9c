"""Where one training step's time goes, at two real shapes, next to the model FLOPs and the matmul peak.

Shapes (``--shape``):
  gpt2     GPT-2 small: 12 layers × 768, 12 heads, GeLU-tanh, learned positions, vocab 50,257, tied, seq 512
  smollm2  SmolLM2-135M: 30 layers × 576, 9 heads / 3 KV heads, SwiGLU 1,536, RMSNorm, RoPE, vocab 49,152,
           tied, seq 512
``--layers N`` keeps the width but uses N layers; ``--steps N`` measured steps after one warm-up step.

The step is mwb's own (the trainer's micro-batches, ``GPTSpec.forward``, the flat-buffer optimizer), taken
apart into phases timed with ``time.perf_counter``: data (fetch the micro-batch), forward (embedding
through the final norm), loss (the output layer and the cross-entropy's forward, one fused function),
backward (``loss.backward()``, the loss's backward included) and optimizer (gradient sync, norm, clip,
AdamW). One further step runs under ``torch.profiler``; its operators' self CPU time is summed by family.

Model FLOPs per step (``mwb.core.plan.flops_per_iteration``, no recomputation):
  B·s · 3 · (2·N_matmul + 4·L·s·a·d + 2·h·V_pad)
with N_matmul the transformer blocks' matmul weights (norms and biases excluded), L layers, a query heads of
dimension d (attention scores and values over the full s×s, causal masking not subtracted), h hidden, V_pad
the vocabulary padded to a multiple of 128; ×3 is forward + backward. For GPT-2 this equals the
Megatron paper's 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)). The matmul peak is measured in the same run: best
of 5 ``torch.mm`` of two 2048² matrices, fp32 and bf16, same threads.

    python benchmarks/profile_step.py                         # both shapes, batch 2, 3 steps
    python benchmarks/profile_step.py --layers 2 --steps 2    # a quick look
"""
from __future__ import annotations

import argparse
import os
import re
import time
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bench_train_throughput import build, matmul_peak_gflops, step_flops  # noqa: E402

FAMILIES = [  # (family, regex on the aten op name), first match wins
    ("matmul", r"aten::(mm|addmm|bmm|matmul|linear|baddbmm)$"),
    ("attention", r"scaled_dot_product|_flash_attention|_efficient_attention|attention"),
    ("cross-entropy", r"logsumexp|log_softmax|nll_loss|cross_entropy"),
    ("optimizer", r"_foreach|lerp|addcdiv|addcmul|sqrt|linalg_vector_norm"),
    ("norm", r"layer_norm|rms_norm|native_layer_norm"),
    ("activation", r"gelu|silu|tanh|relu"),
    ("copies", r"aten::(copy_|clone|cat|contiguous|_to_copy|to|index_put_|scatter|gather)$"),
    ("embedding", r"embedding"),
    ("elementwise", r"aten::(add|add_|mul|mul_|sub|div|exp|exp_|neg|pow|where|masked_fill|fill_|zero_|zeros|"
                    r"sum|mean|max|clamp|rsqrt)"),
]


class PhaseTimer:
    """One step taken apart: the same calls as ``Trainer.train_step`` with one micro-batch, timed."""

    def __init__(self, trainer) -> None:
        self.t = trainer
        self.loss_s = 0.0
        loss_fn = trainer.model.loss_fn
        fused = loss_fn.head_loss  # timed by wrapping, not by hooks (a hooked loss module is not fused)

        def timed_head_loss(*a, **kw):
            t0 = time.perf_counter()
            out = fused(*a, **kw)
            self.loss_s = time.perf_counter() - t0
            return out
        loss_fn.head_loss = timed_head_loss

    def step(self) -> dict:
        t, c = self.t, time.perf_counter
        t._set_train(True)
        t0 = c()
        (mb,) = t._microbatches(t.train_data, t.step)
        t1 = c()
        t.optimizer.zero_grad()
        loss_sum, count = t.spec.forward(t.model, mb)
        t2 = c()
        (loss_sum / count).backward()
        t3 = c()
        t.optimizer.step(3e-4)
        t4 = c()
        t.step += 1
        return {"data": t1 - t0, "forward": t2 - t1 - self.loss_s, "loss": self.loss_s, "backward": t3 - t2,
                "optimizer": t4 - t3, "total": t4 - t0}


def families(prof) -> dict:
    out: dict = defaultdict(float)
    for ev in prof.key_averages():
        us = ev.self_cpu_time_total
        for fam, pat in FAMILIES:
            if re.search(pat, ev.key):
                out[fam] += us
                break
        else:
            out["other"] += us
    total = sum(out.values()) or 1.0
    return {k: (v / 1e6, v / total) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def profile_shape(shape: str, args) -> None:
    trainer = build(shape, args.layers, args.batch, args.seq, args.precision, args.compile)
    timer = PhaseTimer(trainer)
    timer.step()  # warm-up (and compilation with --compile)
    rows = [timer.step() for _ in range(args.steps)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        timer.step()
    flops = step_flops(trainer.cfg)
    peak = {p: matmul_peak_gflops(d) for p, d in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    best = min(rows, key=lambda r: r["total"])
    m = trainer.cfg.model
    tokens = args.batch * args.seq
    print(f"\n## {shape}: {m.num_layers} × {m.hidden_size}, {m.num_attention_heads} heads / {m.query_groups} KV, "
          f"seq {args.seq} × batch {args.batch}, {args.precision}{', compiled blocks' if args.compile else ''}")
    print(f"model FLOPs per step {flops:.4g} (B·s·3·(2·N_matmul + 4·L·s·a·d + 2·h·V_pad)); matmul peak "
          f"fp32 {peak['fp32']:.0f}, bf16 {peak['bf16']:.0f} GFLOP/s (torch.mm 2048², this run)")
    ach = flops / best["total"] / 1e9
    print(f"fastest step {best['total']:.3f} s = {tokens / best['total']:.0f} tok/s, {ach:.1f} GFLOP/s = "
          f"{ach / peak[args.precision]:.0%} of the {args.precision} peak (MFU)\n")
    print("| phase | fastest step s | share | median s |")
    print("| --- | ---: | ---: | ---: |")
    for k in ("data", "forward", "loss", "backward", "optimizer"):
        med = sorted(r[k] for r in rows)[len(rows) // 2]
        print(f"| {k} | {best[k]:.4f} | {best[k] / best['total']:.1%} | {med:.4f} |")
    print("\n| op family (profiled step, self CPU time) | s | share |")
    print("| --- | ---: | ---: |")
    fams = families(prof)
    for fam, (s, share) in fams.items():
        print(f"| {fam} | {s:.4f} | {share:.1%} |")
    # the MFU this host allows these kernels: every other op free, the matmuls and attention as measured
    core = sum(fams.get(f, (0.0, 0.0))[0] for f in ("matmul", "attention"))
    if core > 0:
        ceil = flops / core / 1e9
        print(f"\nmatmul + attention kernels alone: {core:.3f} s = {ceil:.1f} GFLOP/s = "
              f"{ceil / peak[args.precision]:.0%} of the {args.precision} peak: the MFU ceiling if every other op "
              f"took no time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=["gpt2", "smollm2", "both"], default="both")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers, same width")
    ap.add_argument("--steps", type=int, default=3, help="measured steps (after one warm-up)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile each block (train.compile)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# mwb training step profile, {args.threads} thread(s), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for shape in (["gpt2", "smollm2"] if args.shape == "both" else [args.shape]):
        profile_shape(shape, args)


if __name__ == "__main__":
    main()
