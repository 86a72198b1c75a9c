"""Expert parallelism: shard the experts of every MoE layer over the "ep" group and move tokens to them.

Layout. ``ep`` is the fastest factor of data parallelism, so the ranks of one EP group train *different*
micro-batches. EP rank r holds experts ``[r·E/ep, (r+1)·E/ep)`` (``param.ep_slice``); replicas of the same
expert shard live on the "edp" ranks and their gradients are summed there by the optimizer
(``param.expert = True``); the gradient norm sums the expert part over "ep".

Tensor parallelism (expert-TP = TP). The experts' ffn dimension is split over TP like a dense MLP
(``w1``/``w3`` by columns, ``w2`` by rows). Routing happens once per micro-batch on identical tokens on
every TP rank: without SP the MoE input is replicated (entered with ``copy_to_tp``), with SP the sequence is
all-gathered first. Each TP rank then dispatches the same tokens within its own EP group (ranks with the
same TP rank hold the same ffn shard), computes partial expert outputs, weights them by the router
probabilities and the partial sums leave the region with an all-reduce (or a reduce-scatter back to the
sequence shard under SP). Because the probability weighting happens *before* that reduction, every
gradient inside the region - including the router's - is a partial sum over TP: the router weight is
flagged ``sequence_parallel`` so the optimizer all-reduces it over TP, and the aux losses are attached with
weight 1/tp on each TP rank. Shared experts are ordinary TP-parallel MLPs (handled by
:mod:`tensor_parallel`).

Dispatchers. ``alltoall`` (default): exchange per-expert counts, then one all-to-all of the routed tokens
there and one back (uneven splits), with the inverse exchange in backward. ``allgather``: every EP rank
gathers all tokens and routing decisions, computes its experts' share and reduce-scatters the sums back;
cheaper to set up for small EP, more traffic for large EP. Both drop (capacity mode) on the source rank
before dispatch, so what is dropped depends only on the micro-batch, never on the layout.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .collectives import (all_reduce_no_grad, all_to_all, copy_to_tp, gather_from_sequence, group_rank,
                          group_size, reduce_from_tp, reduce_scatter_to_sequence)
from .dims import LayoutError
from ..models.moe import (GroupedExperts, LocalDispatcher, MoELayer, aux_loss_sums, combine, reset_aux_losses,
                          set_aux_loss_scale, sort_by_expert)


class ExpertParallelDispatcher(LocalDispatcher):
    """Routes tokens to experts sharded over ``ep_group``, inside a TP region over ``tp_group``."""

    def __init__(self, tp_group, sp: bool, ep_group, num_experts: int, mode: str = "alltoall") -> None:
        self.tp_group, self.sp, self.ep_group, self.mode = tp_group, sp, ep_group, mode
        self.tp_size = group_size(tp_group)
        self.ep_size, self.ep_rank = group_size(ep_group), group_rank(ep_group)
        self.num_local = num_experts // self.ep_size
        self.first = self.ep_rank * self.num_local

    # ------------------------------------------------------------------------------- TP region
    def enter(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return x
        return gather_from_sequence(x, self.tp_group) if self.sp else copy_to_tp(x, self.tp_group)

    def exit(self, y: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return y
        return reduce_scatter_to_sequence(y, self.tp_group) if self.sp else reduce_from_tp(y, self.tp_group)

    # ------------------------------------------------------------------------------- dispatch
    def dispatch(self, tokens, experts, weights, keep, module: GroupedExperts, num_experts: int):
        if self.ep_size == 1:
            return super().dispatch(tokens, experts, weights, keep, module, num_experts)
        if self.mode == "allgather":
            return self._allgather(tokens, experts, weights, keep, module)
        return self._alltoall(tokens, experts, weights, keep, module, num_experts)

    def _alltoall(self, tokens, experts, weights, keep, module, num_experts):
        ep, el = self.ep_size, self.num_local
        e, w, tok = sort_by_expert(experts, weights, keep)  # grouped by destination rank, then expert
        send = torch.bincount(e, minlength=num_experts).view(ep, el)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.ep_group)  # recv[r, j]: rows from r for my expert j
        in_splits, out_splits = send.sum(1).tolist(), recv.sum(1).tolist()
        rx = all_to_all(tokens[tok], self.ep_group, out_splits, in_splits)
        # Arrived rows are ordered (source rank, local expert); the grouped matmul wants (expert, source).
        seg = torch.repeat_interleave(torch.arange(ep * el, device=rx.device), recv.reshape(-1))
        perm = torch.argsort(seg % el, stable=True)
        ys = module(rx[perm], recv.sum(0).tolist())
        back = torch.empty_like(perm)
        back[perm] = torch.arange(perm.numel(), device=perm.device)
        ys = all_to_all(ys[back], self.ep_group, in_splits, out_splits)
        return combine(ys, w, tok, tokens.size(0))

    def _allgather(self, tokens, experts, weights, keep, module):
        t, k = experts.shape
        # [1, T, ·] views: gather/reduce-scatter along dim 1 (rank-major), gradients reduce-scattered back.
        all_tokens = gather_from_sequence(tokens[None], self.ep_group)[0]
        all_weights = gather_from_sequence(weights[None], self.ep_group)[0]
        all_experts = _gather_rows(experts, self.ep_group)
        mine = (all_experts >= self.first) & (all_experts < self.first + self.num_local)
        if keep is not None:
            mine &= _gather_rows(keep, self.ep_group)
        e, w, tok = sort_by_expert(all_experts - self.first, all_weights, mine)
        counts = torch.bincount(e, minlength=self.num_local).tolist()
        y = combine(module(all_tokens[tok], counts), w, tok, all_tokens.size(0))
        return reduce_scatter_to_sequence(y[None], self.ep_group)[0]


def _gather_rows(x: torch.Tensor, group) -> torch.Tensor:
    """All-gather equal row blocks of a non-differentiable tensor (rank-major)."""
    parts = [torch.empty_like(x) for _ in range(group_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts)


def _shard_param(old: nn.Parameter, lo: int, hi: int, tp_dim, tp: int, tp_rank: int) -> nn.Parameter:
    shape = list(old.shape)
    full = tuple(shape)
    shape[0] = hi - lo
    if tp_dim is not None:
        shape[tp_dim] //= tp
    new = nn.Parameter(torch.empty(shape, device=old.device, dtype=old.dtype), requires_grad=old.requires_grad)
    new.expert, new.ep_slice, new.full_shape = True, (lo, hi), full
    new.tp_dim, new.tp_rank, new.sequence_parallel = tp_dim, tp_rank, False
    return new


def parallelize_experts(model: nn.Module, state) -> nn.Module:
    """Shard every MoE layer's experts over EP (and their ffn over TP) and install the dispatcher.
    Run after :func:`~mwb.core.parallel.tensor_parallel.parallelize_tensor`, on the meta device."""
    ep_group, tp_group = state.ep_group, state.tp_group
    ep, tp = group_size(ep_group), group_size(tp_group)
    ep_rank, tp_rank = group_rank(ep_group), group_rank(tp_group)
    for module in model.modules():
        if not isinstance(module, MoELayer):
            continue
        cfg = module.cfg
        if module.num_experts % ep:  # normally caught earlier by ParallelDims.check_model
            choices = ", ".join(str(d) for d in range(1, module.num_experts + 1) if module.num_experts % d == 0)
            raise LayoutError(f"number of experts {module.num_experts} is not divisible by ep {ep}; "
                              f"choose ep among {choices}")
        ffn = module.experts.w1.size(-1)
        if ffn % tp:
            raise LayoutError(f"expert ffn size {ffn} (model.moe_ffn_hidden_size) is not divisible by tp {tp}")
        el = module.num_experts // ep
        lo, hi = ep_rank * el, (ep_rank + 1) * el
        ex = module.experts
        dims = {"w1": 2, "w3": 2, "w2": 1}
        for name, dim in dims.items():
            old = getattr(ex, name)
            if old is not None:
                setattr(ex, name, _shard_param(old, lo, hi, dim if tp > 1 else None, tp, tp_rank))
        # Router: replicated over TP, but its gradient is a partial sum there (see the module docstring).
        module.router.weight.sequence_parallel = tp > 1
        module.dispatcher = ExpertParallelDispatcher(tp_group, state.sp, ep_group, module.num_experts,
                                                     cfg.moe_dispatcher)
    return model


# ------------------------------------------------------------------------------------ trainer hooks


def begin_moe_step(loss_scale: float, num_microbatches: int) -> None:
    """Before a step's schedule: aux-loss gradients are scaled by ``loss_scale / M`` (M = micro-batches
    of the global batch over all data-parallel ranks), making the objective LM loss + mean aux."""
    reset_aux_losses()
    set_aux_loss_scale(loss_scale / max(num_microbatches, 1))


def moe_step_metrics(state, num_microbatches: int) -> dict[str, float]:
    """The step's aux terms, summed over MoE layers and averaged over the global batch's micro-batches.
    Every rank must call this (one all-reduce); TP ranks hold copies, so only TP rank 0 contributes."""
    sums = aux_loss_sums()
    names = ("moe_aux_loss", "moe_z_loss")
    vals = torch.tensor([sums.get(n, 0.0) if state.tp_rank == 0 else 0.0 for n in names], dtype=torch.float64)
    if state.dims.world_size > 1:
        all_reduce_no_grad(vals, dist.group.WORLD)
    out = {n: float(v) / max(num_microbatches, 1) for n, v in zip(names, vals)}
    return {n: v for n, v in out.items() if n == "moe_aux_loss" or v != 0.0}
