"""Training throughput of mwb against Hugging Face ``transformers`` of the same shape, on this CPU.

Shapes (``--shapes``):
  small    4 layers × 256, 4 heads, seq 256, batch 8, vocab 8,192 (per-step overheads dominate) vs GPT2LMHeadModel
  gpt2     GPT-2 small: 12 × 768, 12 heads, seq 512, batch 2, vocab 50,257, tied          vs GPT2LMHeadModel
  smollm2  SmolLM2-135M: 30 × 576, 9 heads / 3 KV heads, SwiGLU 1,536, RMSNorm, RoPE, vocab 49,152, tied,
           seq 512, batch 2                                                                vs LlamaForCausalLM
``--layers N`` keeps a shape's width with N layers. Both sides have dropout 0 and SDPA attention and train
with AdamW (lr 3e-4, betas 0.9/0.95, weight decay 0.01) and gradient clipping at 1.0 on the same synthetic
batches, in one process with the same thread count. mwb runs its real training step (``Trainer.train_step``:
data, forward, backward, the flat-buffer optimizer); Hugging Face ``loss = model(ids, labels=ids).loss;
backward; clip; step``. Steps alternate (mwb, HF[, mwb compiled], mwb, HF, ...), so machine load hits all
alike; rows give the fastest and the median step.

Precision: fp32 on both sides, or ``--precision bf16``: mwb's bf16 path (bf16 weights and activations, fp32
master weights and gradient buffer) against HF in ``torch.autocast("cpu", bfloat16)`` over fp32 weights.
``--compile`` adds mwb with ``train.compile`` (every block through ``torch.compile``; warm-up steps excluded).

Every row states its FLOP count: model FLOPs per step from ``mwb.core.plan.flops_per_iteration`` (no
recomputation) = B·s·3·(2·N_matmul + 4·L·s·a·d + 2·h·V_pad), N_matmul the blocks' matmul weights, a query
heads of dimension d over the full s×s, V_pad the vocabulary padded to 128 (for GPT shapes exactly the
Megatron paper's 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))). MFU divides achieved FLOP/s by this machine's matmul
peak measured in the same run (best ``torch.mm`` of 2048² matrices in the run's precision, same threads).

    python benchmarks/bench_train_throughput.py                                   # 3 shapes, fp32, 8 steps
    python benchmarks/bench_train_throughput.py --precision bf16 --compile
    python benchmarks/bench_train_throughput.py --shapes small --layers 2 --steps 2 --warmup 1   # smoke run
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SHAPES = {
    "small": {"model": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "activation": "gelu_tanh",
                        "vocab_size": 8192, "max_position_embeddings": 256}, "seq": 256, "batch": 8},
    "gpt2": {"model": {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "activation": "gelu_tanh",
                       "vocab_size": 50257, "max_position_embeddings": 1024}, "seq": 512, "batch": 2},
    "smollm2": {"model": {"num_layers": 30, "hidden_size": 576, "num_attention_heads": 9, "num_query_groups": 3,
                          "ffn_hidden_size": 1536, "activation": "swiglu", "normalization": "rmsnorm",
                          "position_embedding": "rope", "rope_theta": 100000.0, "bias": False,
                          "vocab_size": 49152, "max_position_embeddings": 2048}, "seq": 512, "batch": 2},
    "gpt-1.3b": {"model": {"num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
                           "activation": "gelu_tanh", "vocab_size": 50257, "max_position_embeddings": 2048},
                 "seq": 2048, "batch": 1},
}
FLOP_FORMULA = "B·s·3·(2·N_matmul + 4·L·s·a·d + 2·h·V_pad)"


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


def run_config(shape: str, layers, batch: int, seq: int, precision: str, compile_: bool):
    """(run config, synthetic batches) for a named shape (``layers`` overrides the depth), dropout 0, tied."""
    from mwb.core.config import RunConfig, update
    from mwb.core.training.batches import SyntheticTokens
    model = dict(SHAPES[shape]["model"], dropout=0.0, tie_embeddings=True)
    if layers:
        model["num_layers"] = layers
    tree = {"model": model,
            "optim": {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.01, "clip_grad": 1.0,
                      "lr_schedule": "constant"},
            "train": {"steps": 10**6, "micro_batch_size": batch, "global_batch_size": batch, "seq_length": seq,
                      "precision": precision, "compile": compile_}}
    return update(RunConfig(), tree), SyntheticTokens(model["vocab_size"], seq, seed=0)


def build(shape: str, layers, batch: int, seq: int, precision: str, compile_: bool, device: str = "cpu"):
    """mwb's trainer for a named shape (see :func:`run_config`)."""
    from mwb.core.training.model_spec import GPTSpec
    from mwb.core.training.trainer import Trainer
    cfg, data = run_config(shape, layers, batch, seq, precision, compile_)
    return Trainer(cfg, GPTSpec(cfg, cfg.model.vocab_size), data, device=device)


def step_flops(cfg) -> float:
    """Model FLOPs of one step of run config ``cfg`` (see the module docstring for the formula)."""
    from mwb.core.plan import ModelShape, flops_per_iteration
    t = cfg.train
    return flops_per_iteration(ModelShape.from_config(cfg.model, t.seq_length), t.global_batch_size, "none")


class HFStepper:
    """The same shape in ``transformers`` (GPT2LMHeadModel or LlamaForCausalLM), trained on the same batches
    as mwb's run config ``cfg``; bf16 runs under autocast over fp32 weights. ``fused`` picks torch's fused
    AdamW kernel (HF Trainer's default optimizer on CUDA), else torch's default (foreach)."""

    def __init__(self, cfg, data, precision: str, device: str = "cpu", fused: bool = False) -> None:
        m, t = cfg.model, cfg.train
        self.device = device
        if m.activation == "swiglu":
            from transformers import LlamaConfig, LlamaForCausalLM
            cfg = LlamaConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.ffn_size,
                              num_hidden_layers=m.num_layers, num_attention_heads=m.num_attention_heads,
                              num_key_value_heads=m.query_groups, max_position_embeddings=m.max_position_embeddings,
                              rope_theta=m.rope_theta, rms_norm_eps=m.norm_eps, tie_word_embeddings=True,
                              attention_bias=False, mlp_bias=False, bos_token_id=0, eos_token_id=0)
            kind = LlamaForCausalLM
        else:
            from transformers import GPT2Config, GPT2LMHeadModel
            cfg = GPT2Config(vocab_size=m.vocab_size, n_positions=m.max_position_embeddings, n_embd=m.hidden_size,
                             n_layer=m.num_layers, n_head=m.num_attention_heads, resid_pdrop=0.0, embd_pdrop=0.0,
                             attn_pdrop=0.0, activation_function="gelu_new", tie_word_embeddings=True,
                             bos_token_id=0, eos_token_id=0)
            kind = GPT2LMHeadModel
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(0)
        with torch.device(device):  # initialised where it trains (a 1.3B model in seconds on a GPU)
            self.model = kind(cfg).train()
        self.autocast = precision == "bf16"
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01,
                                     **({"fused": True} if fused else {}))
        self.data, self.b, self.step_no = data, t.micro_batch_size, 0

    def step(self) -> None:
        from mwb.core.training.batches import get_microbatches
        (mb,) = get_microbatches(self.data, self.step_no, self.b, self.b, 1, 0, torch.device(self.device))
        ids = mb["tokens"][:, :-1]
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
            loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.step_no += 1


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def alternate(fns: dict, steps: int, warmup: int, timer=timed) -> dict:
    """{name: [seconds of each measured call]}, calling the functions in turn, warm-up calls dropped."""
    times = {k: [] for k in fns}
    for i in range(warmup + steps):
        for k, fn in fns.items():
            dt = timer(fn)
            if i >= warmup:
                times[k].append(dt)
    return times


def bench_shape(shape: str, args) -> dict:
    spec = SHAPES[shape]
    seq, batch = args.seq or spec["seq"], args.batch or spec["batch"]
    trainer = build(shape, args.layers, batch, seq, args.precision, False)
    steppers = {"mwb": trainer.train_step, "hf": HFStepper(trainer.cfg, trainer.train_data, args.precision).step}
    if args.compile:
        compiled = build(shape, args.layers, batch, seq, args.precision, True)
        steppers["mwb compiled"] = compiled.train_step
    times = alternate(steppers, args.steps, args.warmup)
    flops = step_flops(trainer.cfg)
    m = trainer.cfg.model
    out = {"shape": shape, "label": f"{m.num_layers} × {m.hidden_size}, {m.num_attention_heads}/{m.query_groups} heads, "
                                     f"seq {seq} × {batch}", "flops": flops, "tokens": batch * seq}
    for name, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        out[name] = {"best_s": best, "median_s": med, "tok_s": batch * seq / best,
                     "tok_s_median": batch * seq / med, "gflops": flops / best / 1e9, "spread": max(ts) / best}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["small", "gpt2", "smollm2"])
    ap.add_argument("--layers", type=int, default=None, help="fewer layers, same width")
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--steps", type=int, default=8, help="measured steps per model and shape")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--compile", action="store_true", help="also mwb with train.compile")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.precision]
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    peaks, rows, loads = [matmul_peak_gflops(dtype)], [], []
    for shape in args.shapes:  # the peak is re-measured between shapes: the best reading stands for the machine
        loads.append(os.getloadavg()[0])
        rows.append(bench_shape(shape, args))
        peaks.append(matmul_peak_gflops(dtype))
    peak = max(peaks)
    hf_side = "HF bf16 autocast" if args.precision == "bf16" else "HF fp32"
    print(f"# mwb vs transformers, mwb {args.precision} / {hf_side}, {args.threads} thread(s), {args.steps} measured "
          f"steps per model, alternating; matmul peak (torch.mm 2048² {args.precision}, best of {len(peaks)} "
          f"readings) {peak:.0f} GFLOP/s; load average (1 min) per shape "
          f"{', '.join(f'{x:.1f}' for x in loads)}\n")
    comp = " | mwb compiled tok/s | compile speed-up" if args.compile else ""
    print("| shape | model FLOPs/step = " + FLOP_FORMULA + " | mwb tok/s | HF tok/s | mwb/HF best | mwb/HF median | "
          "mwb GFLOP/s (MFU) | HF GFLOP/s (MFU)" + comp + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---:" + (" | ---: | ---:" if args.compile else "") + " |")
    for r in rows:
        m, f = r["mwb"], r["hf"]
        line = (f"| {r['shape']}: {r['label']} | {r['flops']:.3e} | {m['tok_s']:.0f} | {f['tok_s']:.0f} | "
                f"{m['tok_s'] / f['tok_s']:.2f} | {m['tok_s_median'] / f['tok_s_median']:.2f} | "
                f"{m['gflops']:.1f} ({m['gflops'] / peak:.0%}) | {f['gflops']:.1f} ({f['gflops'] / peak:.0%})")
        if args.compile:
            c = r["mwb compiled"]
            line += f" | {c['tok_s']:.0f} ({c['gflops'] / peak:.0%} MFU) | {c['tok_s'] / m['tok_s']:.2f}×"
        print(line + " |")
    worst = max(max(v["spread"] for k, v in r.items() if isinstance(v, dict)) for r in rows)
    print(f"\nslowest/fastest measured step of one model and shape: up to {worst:.2f}× (machine load; "
          f"1.0× on an idle machine)")


if __name__ == "__main__":
    main()
