"""Per-rank check of the sequence-parallel column linear (run under run_ranks): what it saves, and that it
equals one process's plain linears."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mwb.core.parallel import collectives as C
from mwb.core.parallel.tensor_parallel import ColumnParallelLinear
from mwb.core.plan.measure import count_saved


def _rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def check_sp_linear(rank: int, world: int, plain_gemm: bool) -> dict:
    """Two column-parallel linears (q and k, say) fed by one all-gathered sequence. ``plain_gemm`` swaps the
    gemm for an equal function that is not ``F.linear``, which takes the old path (saves the gathered input)."""
    g = dist.new_group(list(range(world)))
    b, s, h, out = 2, 4 * world, 6, 4 * world
    x_full = _rand(0, b, s, h)
    ws = [_rand(10 + i, out, h) for i in range(2)]
    bs = [_rand(20 + i, out) for i in range(2)]
    ups = [_rand(30 + i, b, s, out // world * world) for i in range(2)]
    rows = slice(rank * out // world, (rank + 1) * out // world)
    seq = slice(rank * s // world, (rank + 1) * s // world)
    # one process: plain linears on the whole sequence
    xr = x_full.clone().requires_grad_()
    wr = [w.clone().requires_grad_() for w in ws]
    br = [bb.clone().requires_grad_() for bb in bs]
    sum((F.linear(xr, w, bb) * up).sum() for w, bb, up in zip(wr, br, ups)).backward()
    # this rank: its sequence shard in, its output columns out
    lins = []
    for w, bb in zip(ws, bs):
        lin = ColumnParallelLinear(h, out, True, g, dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(w[rows])
            lin.bias.copy_(bb[rows])
        if plain_gemm:
            lin.gemm = lambda x, w_, b_: F.linear(x, w_, b_)
        lins.append(lin)
    x = x_full[:, seq].clone().requires_grad_()

    def fwd(x):
        full = C.gather_sequence_for_linears(x, g)
        return [lin(full) for lin in lins]
    params = tuple(p for lin in lins for p in lin.parameters())
    ys, saved = count_saved(fwd, x, exclude=params)
    sum((y * up[:, :, rows]).sum() for y, up in zip(ys, ups)).backward()
    res = {"saved_bytes": saved.bytes, "local_bytes": x.numel() * x.element_size(),
           "out": all(torch.allclose(y, F.linear(x_full, w, bb)[:, :, rows]) for y, w, bb in zip(ys, ws, bs)),
           "grad_input": torch.allclose(x.grad, xr.grad[:, seq]),
           "grad_weight": all(torch.allclose(lin.weight.grad, w.grad[rows]) for lin, w in zip(lins, wr)),
           "grad_bias": all(torch.allclose(lin.bias.grad, bb.grad[rows]) for lin, bb in zip(lins, br))}
    return res
