"""Each training-step change of issue 24 against what it replaced, measured alternately in one run.

  optimizer      the flat-buffer step (one AdamW update per buffer, decay on one prefix) against torch's
                 AdamW over every parameter separately (``foreach=False``: one pow/sqrt/div/addcdiv per
                 parameter, the step before), same gradients, same clip
  cross-entropy  the blocked cross-entropy against ``F.cross_entropy(logits[..., :V].float())``, forward +
                 backward on [B·s, V_pad] logits, and the bytes autograd keeps for backward; then fp32 logits
                 with no padded column (V = V_pad): the in-place path against ``F.cross_entropy``
  grad-norm      the global gradient norm over the model's flat fp32 gradient buffer: fp32 rows summed in
                 float64 (``sum_of_squares``) against ``vector_norm(buffer, dtype=float64)`` (the step before)
  grad-buffer    the flat gradient buffer's first accumulation of a step: each parameter's gradient copied
                 into its stale slice (lazy zeroing) against ``zero_()`` of the whole buffer then ``add_``
                 per parameter (the step before); the model's own parameter shapes
  rope           rotary embeddings, forward + backward of the query heads at the SmolLM2 shape (9 heads ×
                 64, seq × batch of the run): the fp32 autograd function (three kernels each way, only the
                 tables saved) against ``x·cos + cat(-x2, x1)·sin`` (the step before)
  rmsnorm        RMSNorm forward + backward at the SmolLM2 width (576, seq × batch of the run): the fp32
                 autograd function (five passes, x̂ and 1/rms saved) against ``nn.RMSNorm`` (the step before)
  output-layer   the output layer and the cross-entropy, forward + backward on [B·s, h] hidden states: one
                 fused function whose logits become their own gradient, from a workspace kept between steps
                 (``linear_cross_entropy``), against ``F.linear`` then the cross-entropy above (the step
                 before); the note gives the page faults of one call each
  main-grad      a whole training step with the weight gradients of the linear layers, the embedding and the
                 fused output layer written straight into ``main_grad`` against autograd's route (fresh
                 gradient, AccumulateGrad, the optimizer's hook copying it in: the step before)
  precision      a whole training step in bf16 (fp32 master weights, fp32 gradient buffer) against fp32
  compile        a whole training step with ``train.compile`` against eager (after the compile warm-up)

    python benchmarks/bench_step_changes.py                    # GPT-2 small width, 4 layers, seq 512, batch 2
    python benchmarks/bench_step_changes.py --layers 2 --seq 128 --reps 3 --skip compile
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench_train_throughput import SHAPES, alternate, build  # noqa: E402


def best_median(fns: dict, reps: int) -> dict:
    """{name: (best, median)} seconds over ``reps`` alternating calls after one warm-up."""
    return {k: (min(v), statistics.median(v)) for k, v in alternate(fns, reps, 1).items()}


def row(name: str, base: str, new: str, r: dict, note: str = "") -> None:
    (bb, bm), (nb, nm) = r[base], r[new]
    print(f"| {name} | {base}: {bb:.4f} / {bm:.4f} | {new}: {nb:.4f} / {nm:.4f} | {bb / nb:.2f}× | "
          f"{bm / nm:.2f}× | {note} |")


def bench_optimizer(args) -> None:
    trainer = build(args.shape, args.layers, args.batch, args.seq, "fp32", False)
    trainer.train_step()  # real gradients in the buffer and optimizer state
    opt = trainer.optimizer
    params = [p for p in trainer.model.parameters()]
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for c, p in zip(copies, params):
        c.grad = p.main_grad.clone()
    decay = [c for c, p, (n, _) in zip(copies, params, trainer.model.named_parameters())
             if not (p.dim() == 1 or n.endswith(".bias"))]
    rest = [c for c in copies if all(c is not d for d in decay)]
    ref = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), foreach=False)

    def per_parameter():
        norm = torch.nn.utils.clip_grad_norm_(copies, 1.0, foreach=False)
        ref.step()
        return norm

    r = best_median({"per-parameter": per_parameter, "flat": lambda: opt.apply(3e-4)}, args.reps)
    n = sum(p.numel() for p in params)
    row("optimizer (clip + AdamW)", "per-parameter", "flat", r, f"{len(params)} tensors, {n / 1e6:.1f}M params")


def bench_cross_entropy(args) -> None:
    from mwb.core.models.loss import blocked_cross_entropy
    vocab = SHAPES[args.shape]["model"]["vocab_size"]
    padded = -(-vocab // 128) * 128
    n = args.batch * args.seq
    logits = torch.randn(n, padded)
    labels = torch.randint(0, vocab, (n,))

    def saved_bytes(fn) -> int:
        seen = {}
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: seen.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) and t,
                lambda t: t):
            fn()
        return sum(seen.values())

    def old():
        x = logits.clone().requires_grad_(True)
        F.cross_entropy(x[:, :vocab].float(), labels, reduction="none").sum().backward()

    def new():
        x = logits.clone().requires_grad_(True)
        blocked_cross_entropy(x, labels, vocab).sum().backward()

    r = best_median({"F.cross_entropy": old, "blocked": new}, args.reps)
    sb_old = saved_bytes(lambda: F.cross_entropy(logits.clone().requires_grad_(True)[:, :vocab].float(), labels))
    sb_new = saved_bytes(lambda: blocked_cross_entropy(logits.clone().requires_grad_(True), labels, vocab))
    row("cross-entropy fwd+bwd", "F.cross_entropy", "blocked", r,
        f"[{n}, {padded}] fp32; kept for backward {sb_old / 2**20:.0f} → {sb_new / 2**20:.0f} MiB")
    full = torch.randint(0, padded, (n,))

    def torch_full():
        x = logits.clone().requires_grad_(True)
        F.cross_entropy(x, full, reduction="none").sum().backward()

    def in_place():
        x = logits.clone().requires_grad_(True)
        blocked_cross_entropy(x, full, padded).sum().backward()

    r = best_median({"F.cross_entropy": torch_full, "in-place": in_place}, args.reps)
    row("cross-entropy fwd+bwd, no padded column", "F.cross_entropy", "in-place", r, f"[{n}, {padded}] fp32")


def bench_grad_norm(args) -> None:
    from mwb.core.optim.optimizer import sum_of_squares
    trainer = build(args.shape, args.layers, args.batch, args.seq, "fp32", False)
    trainer.train_step()
    grads = trainer.optimizer.groups[0].grad
    r = best_median({"float64 norm": lambda: torch.linalg.vector_norm(grads, dtype=torch.float64).square().item(),
                     "fp32 rows": lambda: sum_of_squares(grads).item()}, args.reps)
    exact = grads.double().square().sum().item()
    err = abs(sum_of_squares(grads).item() - exact) / exact
    row("gradient norm (global, before clipping)", "float64 norm", "fp32 rows", r,
        f"{grads.numel() / 1e6:.1f}M fp32 gradients; relative difference of Σg² {err:.1e}")


def bench_grad_buffer(args) -> None:
    trainer = build(args.shape, args.layers, args.batch, args.seq, "fp32", False)
    buf = trainer.optimizer.buffers[0]
    grads = [(s.param.main_grad, torch.randn_like(s.param)) for s in buf.slots]

    def zero_then_add():
        buf.grads.zero_()
        for main, g in grads:
            main.add_(g)

    def copy_first():
        for main, g in grads:
            main.copy_(g)
    r = best_median({"zero + add": zero_then_add, "copy into stale": copy_first}, args.reps)
    row("gradient buffer, first accumulation of a step", "zero + add", "copy into stale", r,
        f"{buf.numel / 1e6:.1f}M fp32 gradients, {len(grads)} parameters")


def bench_rope(args) -> None:
    from mwb.core.models.transformer import apply_rope, rope_tables
    heads, d = 9, 64
    cos, sin = rope_tables(torch.arange(args.seq), d, 100000.0)
    x = torch.randn(args.batch, args.seq, heads, d).transpose(1, 2).requires_grad_(True)
    grad = torch.randn(args.batch, heads, args.seq, d)

    def cat_formula():
        h = d // 2
        (x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin).backward(grad)

    def function():
        apply_rope(x, cos, sin).backward(grad)
    r = best_median({"cat formula": cat_formula, "autograd function": function}, args.reps)
    row("rotary embedding fwd+bwd (one layer's queries)", "cat formula", "autograd function", r,
        f"[{args.batch}, {heads}, {args.seq}, {d}] fp32")


def bench_rmsnorm(args) -> None:
    from mwb.core.models.fused import RMSNorm
    ours, ref = RMSNorm(576, eps=1e-5), torch.nn.RMSNorm(576, eps=1e-5)
    x = torch.randn(args.batch, args.seq, 576).requires_grad_(True)
    grad = torch.randn(args.batch, args.seq, 576)
    r = best_median({"nn.RMSNorm": lambda: ref(x).backward(grad), "autograd function": lambda: ours(x).backward(grad)},
                    args.reps)
    row("RMSNorm fwd+bwd (one norm)", "nn.RMSNorm", "autograd function", r, f"[{args.batch}, {args.seq}, 576] fp32")


def _faults(fn) -> int:
    """Minor page faults of one call: fresh memory the kernel had to map and zero."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def bench_output_layer(args) -> None:
    from mwb.core.models.loss import LogitsWorkspace, blocked_cross_entropy, linear_cross_entropy
    m = SHAPES[args.shape]["model"]
    vocab, h = m["vocab_size"], m["hidden_size"]
    padded = -(-vocab // 128) * 128
    n = args.batch * args.seq
    x = torch.randn(n, h).requires_grad_(True)
    w = (torch.randn(padded, h) * 0.02).requires_grad_(True)
    labels = torch.randint(0, vocab, (n,))
    ws = LogitsWorkspace()

    def separate():
        blocked_cross_entropy(F.linear(x, w), labels, vocab).sum().backward()

    def fused():
        linear_cross_entropy(x, w, labels, vocab, ws).sum().backward()
    r = best_median({"linear, then cross-entropy": separate, "fused": fused}, args.reps)
    row("output layer + cross-entropy fwd+bwd", "linear, then cross-entropy", "fused", r,
        f"[{n}, {h}] × [{padded}, {h}] fp32; page faults per call {_faults(separate)} → {_faults(fused)}")


def bench_main_grad(args) -> None:
    from mwb.core.models import main_grad
    trainer = build(args.shape, args.layers, args.batch, args.seq, "fp32", False)

    def step(enabled: bool):
        def run():
            main_grad.ENABLED = enabled
            try:
                trainer.train_step()
            finally:
                main_grad.ENABLED = True
        return run
    r = best_median({"through autograd": step(False), "into main_grad": step(True)}, args.reps)
    row("training step, weight gradients", "through autograd", "into main_grad", r,
        f"{args.batch}×{args.seq} tokens; page faults per step {_faults(step(False))} → {_faults(step(True))}")


def bench_step(args, variant: str) -> None:
    base = build(args.shape, args.layers, args.batch, args.seq, "fp32", False)
    other = build(args.shape, args.layers, args.batch, args.seq, "bf16" if variant == "precision" else "fp32",
                  variant == "compile")
    other.train_step()  # compile warm-up outside the timing
    name = "bf16" if variant == "precision" else "compiled"
    r = best_median({"fp32 eager": base.train_step, name: other.train_step}, args.reps)
    row(f"training step ({variant})", "fp32 eager", name, r, f"{args.batch}×{args.seq} tokens")


ROWS = {"optimizer": bench_optimizer, "cross-entropy": bench_cross_entropy, "grad-norm": bench_grad_norm,
        "grad-buffer": bench_grad_buffer, "rope": bench_rope, "rmsnorm": bench_rmsnorm,
        "output-layer": bench_output_layer, "main-grad": bench_main_grad,
        "precision": lambda args: bench_step(args, "precision"), "compile": lambda args: bench_step(args, "compile")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="gpt2")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=list(ROWS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {args.shape} width, {args.layers} layers, seq {args.seq} × batch {args.batch}, {args.threads} "
          f"thread(s), {args.reps} alternating reps; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| change | before: best / median s | after: best / median s | speed-up (best) | (median) | note |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    for name, bench in ROWS.items():
        if name not in args.skip:
            bench(args)


if __name__ == "__main__":
    main()
