"""Per-rank checks of the differentiable collectives and vocab-parallel layers (run under run_ranks)."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mwb.core.parallel import collectives as C
from mwb.core.parallel.dims import ParallelDims
from mwb.core.parallel.state import build_state
from mwb.core.parallel.tensor_parallel import VocabParallelCrossEntropy, VocabParallelEmbedding


def _full(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def check_collectives(rank: int, world: int) -> dict:
    g = dist.new_group(list(range(world)))
    out = {}
    x_full = _full(0, 2, 4 * world, 6)  # [b, s, h]

    def up(shape):  # the upstream gradient: a function of the output shape, equal on every rank
        return _full(1, *shape)

    def grad_of(fn, x):
        x = x.clone().requires_grad_(True)
        y = fn(x)
        (y * up(y.shape)).sum().backward()
        return y.detach(), x.grad

    w = up(x_full.shape)

    # copy_to_tp: identity forward, all-reduce backward.
    y, gx = grad_of(lambda x: C.copy_to_tp(x, g), x_full)
    out["copy_fwd"] = torch.equal(y, x_full)
    out["copy_bwd"] = torch.allclose(gx, w * world)
    # reduce_from_tp: sum forward, identity backward.
    y, gx = grad_of(lambda x: C.reduce_from_tp(x, g), x_full * (rank + 1))
    out["reduce_fwd"] = torch.allclose(y, x_full * sum(range(1, world + 1)))
    out["reduce_bwd"] = torch.allclose(gx, w)
    # scatter/gather along the sequence are each other's conjugates.
    y, gx = grad_of(lambda x: C.scatter_to_sequence(x, g), x_full)
    s = x_full.size(1) // world
    out["scatter_fwd"] = torch.equal(y, x_full[:, rank * s:(rank + 1) * s])
    expect = torch.cat([up(y.shape)] * world, dim=1)  # every rank's gradient slice gathered
    out["scatter_bwd"] = torch.allclose(gx, expect)
    local = x_full[:, rank * s:(rank + 1) * s]
    y, gx = grad_of(lambda x: C.gather_from_sequence(x, g), local)
    out["gather_fwd"] = torch.equal(y, x_full)
    out["gather_bwd"] = torch.allclose(gx, (w * world)[:, rank * s:(rank + 1) * s])  # reduce-scatter
    y, gx = grad_of(lambda x: C.reduce_scatter_to_sequence(x, g), x_full * (rank + 1))
    out["rs_fwd"] = torch.allclose(y, (x_full * sum(range(1, world + 1)))[:, rank * s:(rank + 1) * s])
    out["rs_bwd"] = torch.allclose(gx, torch.cat([up(y.shape)] * world, dim=1))
    # gather/scatter along the hidden (last) dim.
    h = 3
    xs = _full(2, 2, 5, h * world)
    y, gx = grad_of(lambda x: C.gather_from_tp(x[..., rank * h:(rank + 1) * h], g), xs)
    out["gather_tp_fwd"] = torch.equal(y, xs)
    # all-to-all with uneven splits: rank r sends r+1+j rows to rank j.
    send = [rank + 1 + j for j in range(world)]
    recv = [j + 1 + rank for j in range(world)]
    rows = _full(10 + rank, sum(send), 4)
    y, gx = grad_of(lambda x: C.all_to_all(x, g, recv, send), rows)
    expect_rows = []
    for j in range(world):
        src = _full(10 + j, sum(j + 1 + k for k in range(world)), 4)
        off = sum(j + 1 + k for k in range(rank))
        expect_rows.append(src[off:off + j + 1 + rank])
    out["a2a_fwd"] = torch.equal(y, torch.cat(expect_rows))
    # The backward of all-to-all is the inverse all-to-all: routing the upstream gradient back.
    back = C._all_to_all(up(y.shape), g, send, recv)
    out["a2a_bwd"] = torch.allclose(gx, back)
    # all_gather_with_grad: every rank's gradient is the sum over ranks of the block's gradient.
    blk = _full(20 + rank, 3, 2)
    y, gx = grad_of(lambda x: C.all_gather_with_grad(x, g), blk)
    out["agg_fwd"] = torch.equal(y, torch.cat([_full(20 + j, 3, 2) for j in range(world)]))
    out["agg_bwd"] = torch.allclose(gx, world * up(y.shape)[rank * 3:(rank + 1) * 3])
    return out


def check_vocab_parallel(rank: int, world: int) -> dict:
    state = build_state(ParallelDims(world_size=world, tp=world))
    g = state.tp_group
    vocab, padded, hdim = 37, 40 * world, 8
    out = {}
    # Cross-entropy over sharded logits equals the full cross-entropy over the real vocabulary.
    logits = _full(3, 2, 5, padded).float()
    labels = torch.randint(0, vocab, (2, 5), generator=torch.Generator().manual_seed(4))
    labels[0, 0] = -100  # ignored
    per = padded // world
    local = logits[..., rank * per:(rank + 1) * per].clone().requires_grad_(True)
    loss_sum, count = VocabParallelCrossEntropy(vocab, g)(local, labels)
    loss_sum.backward()
    ref_logits = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(ref_logits[..., :vocab].reshape(-1, vocab), labels.reshape(-1), ignore_index=-100,
                          reduction="sum")
    ref.backward()
    out["ce_value"] = abs(loss_sum.item() - ref.item()) < 1e-4 and count.item() == 9
    out["ce_grad"] = torch.allclose(local.grad, ref_logits.grad[..., rank * per:(rank + 1) * per], atol=1e-6)
    # Vocab-parallel embedding equals a full lookup.
    table = _full(5, padded, hdim).float()
    emb = VocabParallelEmbedding(padded, hdim, g)
    with torch.no_grad():
        emb.weight.copy_(table[rank * per:(rank + 1) * per])
    ids = torch.randint(0, vocab, (3, 7), generator=torch.Generator().manual_seed(6))
    out["embedding"] = torch.allclose(emb(ids), F.embedding(ids, table))
    return out
