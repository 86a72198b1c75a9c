"""Differentiable collectives: the only place where model activations cross ranks.

Each function is an autograd pair whose backward is the conjugate of its forward (copy ↔ all-reduce,
split ↔ all-gather, all-gather ↔ reduce-scatter, all-to-all ↔ the inverse all-to-all). A ``group`` of
``None`` means a group of one: every function is then the identity, so a model runs unchanged on one
process. Tensors are batch-first ``[b, s, h]``; the sequence dimension is 1.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

SEQ_DIM = 1


def group_size(group) -> int:
    return 1 if group is None else dist.get_world_size(group)


def group_rank(group) -> int:
    return 0 if group is None else dist.get_rank(group)


# ------------------------------------------------------------------------------------------ raw helpers


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    if group_size(group) == 1:
        return x
    x = x.contiguous()
    dist.all_reduce(x, group=group)
    return x


def _split(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    n = group_size(group)
    if n == 1:
        return x
    if x.size(dim) % n:
        raise ValueError(f"cannot split dimension {dim} of size {x.size(dim)} over {n} ranks")
    return x.chunk(n, dim=dim)[group_rank(group)].contiguous()


def _gather(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    n = group_size(group)
    if n == 1:
        return x
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim=dim)


def _reduce_scatter(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    n = group_size(group)
    if n == 1:
        return x
    if x.size(dim) % n:
        raise ValueError(f"cannot reduce-scatter dimension {dim} of size {x.size(dim)} over {n} ranks")
    parts = [p.contiguous() for p in x.chunk(n, dim=dim)]
    out = torch.empty_like(parts[0])
    dist.reduce_scatter(out, parts, group=group)
    return out


# ------------------------------------------------------------------------------------ tensor-parallel


class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        return _all_reduce(g.clone(), ctx.group), None


class _ReduceFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce(x.clone(), group)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _ScatterToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _split(x, dim, group)

    @staticmethod
    def backward(ctx, g):
        return _gather(g, ctx.dim, ctx.group), None, None


class _GatherFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group, grad_reduce):
        ctx.dim, ctx.group, ctx.grad_reduce = dim, group, grad_reduce
        return _gather(x, dim, group)

    @staticmethod
    def backward(ctx, g):
        if ctx.grad_reduce:
            return _reduce_scatter(g, ctx.dim, ctx.group), None, None, None
        return _split(g, ctx.dim, ctx.group), None, None, None


class _ReduceScatterToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _reduce_scatter(x, dim, group)

    @staticmethod
    def backward(ctx, g):
        return _gather(g, ctx.dim, ctx.group), None, None


def copy_to_tp(x: torch.Tensor, group) -> torch.Tensor:
    """Identity forward, all-reduce backward: entering a TP region with a replicated input."""
    return x if group_size(group) == 1 else _CopyToRegion.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    """All-reduce forward, identity backward: leaving a TP region with partial sums."""
    return x if group_size(group) == 1 else _ReduceFromRegion.apply(x, group)


def gather_from_tp(x: torch.Tensor, group, dim: int = -1) -> torch.Tensor:
    """All-gather ``dim`` forward, keep this rank's slice backward."""
    return x if group_size(group) == 1 else _GatherFromRegion.apply(x, dim % x.dim(), group, False)


# ---------------------------------------------------------------------------------- sequence-parallel


def scatter_to_sequence(x: torch.Tensor, group) -> torch.Tensor:
    """Split the sequence dimension forward, all-gather it backward."""
    return x if group_size(group) == 1 else _ScatterToRegion.apply(x, SEQ_DIM, group)


def gather_from_sequence(x: torch.Tensor, group, grad_reduce: bool = True, dim: int = SEQ_DIM) -> torch.Tensor:
    """All-gather the sequence (``dim``) forward; backward reduce-scatters (the gathered tensor feeds
    computations whose input-gradients are partial sums: TP-sharded matmuls, or every context-parallel rank's
    queries attending to gathered keys) or, with ``grad_reduce=False``, just splits."""
    return x if group_size(group) == 1 else _GatherFromRegion.apply(x, dim, group, grad_reduce)


class SequenceShard:
    """What the linears fed by one all-gathered sequence share in backward.

    :func:`gather_sequence_for_linears` tags the gathered ``[b, s, h]`` tensor with ``(local, shard)``; a
    column-parallel linear that sees the tag saves ``local`` (``[b, s/t, h]``) for backward instead of the
    gathered input and all-gathers it again there. The first backward to need the full input gathers it and
    keeps it in ``full`` until the last of the ``users`` linears is done, so q, k and v (or FC1 and the gate)
    share one re-gather; nothing about the gradient depends on that count. It holds no forward tensor (the
    autograd contexts keep it until backward; under full recompute the local shard must be free to go).
    """

    def __init__(self, group) -> None:
        self.group, self.users, self.full = group, 0, None


def gather_sequence_for_linears(x: torch.Tensor, group) -> torch.Tensor:
    """:func:`gather_from_sequence` whose result carries ``_sp_shard = (x, SequenceShard)``: the entry of a
    sequence-parallel TP region. Any consumer that ignores the tag gets the ordinary all-gather with a
    reduce-scatter backward."""
    if group_size(group) == 1:
        return x
    full = _GatherFromRegion.apply(x, SEQ_DIM, group, True)
    full._sp_shard = (x, SequenceShard(group))
    return full


def start_gather(x: torch.Tensor, dim: int, group):
    """Begin an all-gather of ``x`` along ``dim`` without waiting: returns ``finish()``, which waits and
    returns the gathered tensor (so the caller can compute meanwhile)."""
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(group_size(group))]
    work = dist.all_gather(parts, x, group=group, async_op=True)

    def finish() -> torch.Tensor:
        work.wait()
        return torch.cat(parts, dim=dim)
    return finish


def start_reduce_scatter(x: torch.Tensor, dim: int, group):
    """Begin a reduce-scatter of ``x`` along ``dim`` without waiting: returns ``finish()`` → this rank's
    summed slice."""
    n = group_size(group)
    if x.size(dim) % n:
        raise ValueError(f"cannot reduce-scatter dimension {dim} of size {x.size(dim)} over {n} ranks")
    parts = [p.contiguous() for p in x.chunk(n, dim=dim)]
    out = torch.empty_like(parts[0])
    work = dist.reduce_scatter(out, parts, group=group, async_op=True)

    def finish() -> torch.Tensor:
        work.wait()
        return out
    return finish


def reduce_scatter_to_sequence(x: torch.Tensor, group) -> torch.Tensor:
    """Sum partial results and keep this rank's sequence slice forward, all-gather backward."""
    return x if group_size(group) == 1 else _ReduceScatterToRegion.apply(x, SEQ_DIM, group)


# ------------------------------------------------------------------------------------------ all-to-all


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, out_splits, in_splits):
        ctx.group, ctx.out_splits, ctx.in_splits = group, out_splits, in_splits
        return _all_to_all(x, group, out_splits, in_splits)

    @staticmethod
    def backward(ctx, g):
        return _all_to_all(g, ctx.group, ctx.in_splits, ctx.out_splits), None, None, None


def _all_to_all(x, group, out_splits, in_splits):
    x = x.contiguous()
    rows = sum(out_splits) if out_splits is not None else x.size(0)
    out = x.new_empty((rows,) + tuple(x.shape[1:]))
    dist.all_to_all_single(out, x, output_split_sizes=out_splits, input_split_sizes=in_splits, group=group)
    return out


def all_to_all(x: torch.Tensor, group, out_splits: Optional[list[int]] = None,
               in_splits: Optional[list[int]] = None) -> torch.Tensor:
    """Exchange rows of ``x`` (dim 0) over ``group``: ``in_splits[i]`` rows go to rank i and
    ``out_splits[i]`` rows arrive from it. Backward sends the gradients back the same way."""
    if group_size(group) == 1:
        return x
    return _AllToAll.apply(x, group, out_splits, in_splits)


# ------------------------------------------------------------------------------------- data-parallel


class _AllGatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        ctx.rows = x.size(0)
        return _gather(x, 0, group)

    @staticmethod
    def backward(ctx, g):
        # Every rank's loss depends on every rank's rows: sum those contributions, keep ours.
        g = _all_reduce(g.contiguous().clone(), ctx.group)
        r = group_rank(ctx.group)
        return g[r * ctx.rows:(r + 1) * ctx.rows], None


def all_gather_with_grad(x: torch.Tensor, group) -> torch.Tensor:
    """Concatenate equal-sized row blocks from all ranks (dim 0) with a gradient that reaches each block's
    owner: the sum over ranks of d(loss_r)/d(block). Used for in-batch negatives across data parallelism."""
    return x if group_size(group) == 1 else _AllGatherWithGrad.apply(x, group)


def all_reduce_no_grad(x: torch.Tensor, group, op=None) -> torch.Tensor:
    """In-place all-reduce on a tensor outside autograd (statistics, norms, counters)."""
    if group_size(group) > 1:
        dist.all_reduce(x, op=op or dist.ReduceOp.SUM, group=group)
    return x
