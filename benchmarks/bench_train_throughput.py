"""Training throughput of mwb's GPT against Hugging Face ``GPT2LMHeadModel`` of the same shape, on this CPU.

Per size, both models have the same layers, hidden size, heads, vocabulary, sequence length, tied
embeddings, tanh-GeLU, dropout 0 and SDPA attention; both train with AdamW (lr 3e-4, betas 0.9/0.95,
weight decay 0.01) and gradient clipping at 1.0 on the same synthetic batches, in one process with the
same thread count. mwb runs its real training step (``Trainer.train_step``: data, forward, backward, the
flat-buffer optimizer); Hugging Face the usual ``loss = model(ids, labels=ids).loss; backward; clip; step``.
Steps alternate between the two models (mwb, HF, mwb, HF, ...), so machine load hits both alike; the
tables give medians and the mwb/HF ratio measured in this run.

Achieved GFLOP/s count model FLOPs, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) per step (no recomputation,
causal attention counted in full); MFU divides them by this machine's matmul peak, which the script
measures itself (``torch.mm`` of 2048² fp32 matrices, or bf16 with ``--precision bf16``, same threads).

    python benchmarks/bench_train_throughput.py            # 3 sizes, 8 measured steps each
    python benchmarks/bench_train_throughput.py --quick    # smaller sizes, 4 steps: a smoke run
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# (layers, hidden, heads, seq, micro-batch, vocab)
SIZES = [(2, 256, 4, 256, 4, 8192), (4, 512, 8, 256, 4, 8192), (6, 768, 12, 256, 4, 8192)]
QUICK_SIZES = [(2, 128, 4, 128, 2, 2048), (2, 256, 4, 128, 2, 4096), (4, 384, 6, 128, 2, 8192)]


def matmul_peak_gflops(dtype: torch.dtype = torch.float32, n: int = 2048, reps: int = 5) -> float:
    """Best-of-``reps`` GFLOP/s of one ``torch.mm`` of two n×n matrices (2·n³ FLOPs) with current threads."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def model_flops(b: int, s: int, layers: int, h: int, vocab: int) -> float:
    from mwb.core.plan.formulas import model_flops_per_iteration
    return model_flops_per_iteration(b, s, layers, h, vocab)


def mwb_trainer(size, precision: str):
    from mwb.core.config import RunConfig, update
    from mwb.core.training.batches import SyntheticTokens
    from mwb.core.training.spec import GPTSpec
    from mwb.core.training.trainer import Trainer
    layers, h, a, s, b, vocab = size
    tree = {"model": {"num_layers": layers, "hidden_size": h, "num_attention_heads": a, "dropout": 0.0,
                      "activation": "gelu_tanh", "max_position_embeddings": s, "vocab_size": vocab,
                      "tie_embeddings": True},
            "optim": {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.01, "clip_grad": 1.0,
                      "lr_schedule": "constant"},
            "train": {"steps": 10**6, "micro_batch_size": b, "global_batch_size": b, "seq_length": s,
                      "precision": precision}}
    cfg = update(RunConfig(), tree)
    data = SyntheticTokens(vocab, s, seed=0)
    return Trainer(cfg, GPTSpec(cfg, vocab), data), data


class HFStepper:
    """GPT2LMHeadModel of the same shape, trained on the same batches as the mwb trainer."""

    def __init__(self, size, precision: str, data) -> None:
        from transformers import GPT2Config, GPT2LMHeadModel
        layers, h, a, s, b, vocab = size
        cfg = GPT2Config(vocab_size=vocab, n_positions=s, n_embd=h, n_layer=layers, n_head=a,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(0)
        self.model = GPT2LMHeadModel(cfg).to(DTYPES[precision]).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
        self.data, self.b, self.step_no = data, b, 0

    def step(self) -> None:
        from mwb.core.training.batches import get_microbatches
        (mb,) = get_microbatches(self.data, self.step_no, self.b, self.b, 1, 0)
        ids = mb["tokens"][:, :-1]
        self.opt.zero_grad(set_to_none=True)
        loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.step_no += 1


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_size(size, precision: str, steps: int, warmup: int) -> dict:
    layers, h, a, s, b, vocab = size
    trainer, data = mwb_trainer(size, precision)
    hf = HFStepper(size, precision, data)
    times = {"mwb": [], "hf": []}
    for i in range(warmup + steps):
        for name, fn in (("mwb", trainer.train_step), ("hf", hf.step)):
            dt = timed(fn)
            if i >= warmup:
                times[name].append(dt)
    params = {"mwb": sum(p.numel() for p in {id(p): p for p in trainer.model.parameters()}.values()),
              "hf": sum(p.numel() for p in hf.model.parameters())}
    flops = model_flops(b, s, layers, h, vocab)
    out = {"size": size, "params": params, "flops": flops}
    for name, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        out[name] = {"best_s": best, "median_s": med, "tok_s": b * s / best, "tok_s_median": b * s / med,
                     "gflops": flops / best / 1e9, "spread": max(ts) / best}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer steps (smoke run)")
    ap.add_argument("--steps", type=int, default=None, help="measured steps per model and size")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = QUICK_SIZES if args.quick else SIZES
    steps = args.steps or (4 if args.quick else 8)
    dtype = DTYPES[args.precision]
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    peaks, rows = [matmul_peak_gflops(dtype)], []
    for sz in sizes:  # the peak is re-measured between sizes: the best reading stands for the machine
        rows.append(bench_size(sz, args.precision, steps, 1 if args.quick else args.warmup))
        peaks.append(matmul_peak_gflops(dtype))
    peak = max(peaks)
    print(f"# mwb GPT vs HF GPT2LMHeadModel, {args.precision}, {args.threads} thread(s), {steps} measured steps "
          f"per model, alternating; matmul peak (torch.mm 2048² {args.precision}, best of "
          f"{len(peaks)} readings) {peak:.0f} GFLOP/s\n")
    print("tok/s and GFLOP/s from the fastest step (the least disturbed by other load), ratios from the fastest "
          "and from the median steps\n")
    print("| layers × hidden / heads, seq × batch, vocab | params (mwb / HF) | mwb tok/s | HF tok/s | "
          "mwb/HF best | mwb/HF median | mwb GFLOP/s (MFU) | HF GFLOP/s (MFU) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        layers, h, a, s, b, vocab = r["size"]
        m, f = r["mwb"], r["hf"]
        print(f"| {layers} × {h} / {a}, {s} × {b}, {vocab} | {r['params']['mwb'] / 1e6:.2f}M / "
              f"{r['params']['hf'] / 1e6:.2f}M | {m['tok_s']:.0f} | {f['tok_s']:.0f} | "
              f"{m['tok_s'] / f['tok_s']:.2f} | {m['tok_s_median'] / f['tok_s_median']:.2f} | "
              f"{m['gflops']:.1f} ({m['gflops'] / peak:.0%}) | {f['gflops']:.1f} ({f['gflops'] / peak:.0%}) |")
    worst = max(max(r["mwb"]["spread"], r["hf"]["spread"]) for r in rows)
    print(f"\nslowest/fastest measured step of one model and size: up to {worst:.2f}× (machine load; "
          f"1.0× on an idle machine)")


if __name__ == "__main__":
    main()
