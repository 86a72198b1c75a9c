"""Tokens/s of the MoE layer, forward + backward, with grouped experts vs a Python loop over experts.

Same layer, same weights, same input, same routing: only ``GroupedExperts.impl`` changes.
  loop        one matmul per expert over its contiguous slice of sorted tokens (the baseline)
  bmm         tokens scattered into a zero-padded [E, max_count, h] batch, one torch.bmm per matmul
  grouped_mm  torch._grouped_mm over the ragged groups (no padding)
  auto        what the layer uses by default (grouped_mm when the shapes are aligned, else bmm)

    python benchmarks/moe_grouped_vs_loop.py                       # 8 experts, top-2, fp32
    python benchmarks/moe_grouped_vs_loop.py --dtype bf16 --tokens 8192
"""
from __future__ import annotations

import argparse
import time

import torch

from mwb.core.config import ModelConfig
from mwb.core.models.moe import MoELayer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def make_layer(impl: str, cfg: ModelConfig, dtype: torch.dtype, device: str) -> MoELayer:
    torch.manual_seed(0)
    layer = MoELayer(cfg, impl).to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.02)
    return layer.train()


def _sync(x: torch.Tensor) -> None:
    if x.device.type == "cuda":
        torch.cuda.synchronize()


def bench(layer: MoELayer, x: torch.Tensor, iters: int, warmup: int) -> float:
    for i in range(warmup + iters):
        if i == warmup:
            _sync(x)
            start = time.perf_counter()
        xi = x.detach().requires_grad_()
        layer(xi).float().pow(2).mean().backward()
        layer.zero_grad(set_to_none=True)
    _sync(x)
    return iters * x.shape[0] * x.shape[1] / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per forward (batch 1 × sequence)")
    ap.add_argument("--activation", default="gelu", choices=["gelu", "swiglu"])
    ap.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds over the impls; the best round counts (shared machines are noisy)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--impls", default="loop,bmm,grouped_mm,auto")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = ModelConfig(hidden_size=a.hidden, num_experts=a.experts, moe_top_k=a.top_k, moe_ffn_hidden_size=a.ffn,
                      activation=a.activation, moe_aux_loss_coeff=1e-2)
    x = torch.randn(1, a.tokens, a.hidden, generator=torch.Generator().manual_seed(1))
    x = x.to(device=a.device, dtype=DTYPES[a.dtype])
    print(f"MoE layer fwd+bwd: {a.experts} experts, top-{a.top_k}, hidden {a.hidden}, ffn {a.ffn}, "
          f"{a.tokens} tokens, {a.activation}, {a.dtype}, {a.device}"
          f"{'' if a.device != 'cpu' else f' ({torch.get_num_threads()} threads)'}, "
          f"best of {a.rounds} rounds × {a.iters} iters")
    layers = {impl: make_layer(impl, cfg, DTYPES[a.dtype], a.device) for impl in a.impls.split(",")}
    best: dict[str, float] = {}
    for _ in range(a.rounds):
        for impl, layer in list(layers.items()):
            try:
                best[impl] = max(best.get(impl, 0.0), bench(layer, x, a.iters, a.warmup))
            except (RuntimeError, NotImplementedError) as e:  # e.g. _grouped_mm missing in this build
                print(f"{impl}: unavailable ({str(e).splitlines()[0]})")
                del layers[impl]
    rows = [(impl, best[impl]) for impl in layers]
    base = best.get("loop")
    print(f"| {'impl':<10} | {'tokens/s':>10} | {'vs loop':>7} |")
    print(f"| {'-' * 10} | {'-' * 10} | {'-' * 7} |")
    for impl, tps in rows:
        ratio = f"{tps / base:.2f}x" if base else "n/a"
        print(f"| {impl:<10} | {tps:>10.0f} | {ratio:>7} |")


if __name__ == "__main__":
    main()
