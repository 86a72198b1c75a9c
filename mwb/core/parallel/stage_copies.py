"""Parameters that several pipeline stages each hold a copy of, kept equal to the one-process parameter.

Some parameters are used by layers that the pipeline may put on different stages: T5's relative-position
bias tables are shared by every layer of their stack, and a stack can span stages. Each stage that runs
such layers keeps its own copy. The copies start equal (the initialiser draws a parameter from its name,
which the copies share) and stay equal because their gradients are summed over the pipeline ranks that hold
one before any other reduction, exactly as for a tied word embedding: every copy then holds the gradient of
the single parameter, and the optimizer applies the same update to each. Exactly one copy, the one on the
lowest stage, is the *primary* (``param.stage_copy_primary``): the gradient norm counts only it and a
checkpoint stores only it, so a pipelined run's norm and checkpoint are those of one process.

A model names such parameters in ``stage_copy_names`` (names relative to a chunk). Which pipeline ranks
hold each name is found once, by gathering the names over the pipeline group; since every pipeline group of
a layout holds the same layers on the same pipeline ranks, all ranks then agree on the reduction groups
they create (``new_group`` must be called by every rank, in the same order). The tied word embedding keeps
its own mechanism (the ``embedding`` group of :mod:`.state`): its copies differ in name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from .state import rank_groups


@dataclass
class StageCopies:
    """This rank's copies of one parameter (several with interleaved chunks) and the group that sums them."""
    name: str
    params: list[nn.Parameter]
    group: Optional[object]  # the pipeline ranks holding a copy; None when only this rank does

    def reduce_gradients(self) -> None:
        """Replace every local copy's ``main_grad`` by the sum over all copies."""
        grads = [p.main_grad for p in self.params]
        if len(grads) == 1 and self.group is None:
            return
        total = grads[0].clone()
        for g in grads[1:]:
            total += g
        if self.group is not None:
            dist.all_reduce(total, group=self.group)
        for g in grads:
            g.copy_(total)


def _local_copies(chunks) -> dict[str, list[nn.Parameter]]:
    out: dict[str, list[nn.Parameter]] = {}
    for chunk in chunks:
        params = dict(chunk.named_parameters())
        for name in getattr(chunk, "stage_copy_names", ()):
            if name in params and params[name].requires_grad:  # a frozen copy (LoRA base) needs no reduction
                out.setdefault(name, []).append(params[name])
    return out


def link_stage_copies(chunks, state) -> list[StageCopies]:
    """Mark the primary copies and create the reduction groups. Collective over every rank when pp > 1
    (call it once, at the same point on every rank); local otherwise."""
    local = _local_copies(chunks)
    pp = state.pp_size
    if pp == 1:  # one stage holds everything: at most one copy of each
        holders = {name: [0] for name in local}
    else:
        per_rank: list = [None] * pp
        dist.all_gather_object(per_rank, sorted(local), group=state.pp_group)
        holders = {}
        for r, names in enumerate(per_rank):
            for name in names:
                holders.setdefault(name, []).append(r)
    groups: dict[str, object] = {}
    if pp > 1:
        for ranks in rank_groups(state.dims, ("pp",)):  # every pipeline group, in the same order on all ranks
            for name in sorted(holders):
                members = [ranks[r] for r in holders[name]]
                if len(members) < 2:
                    continue
                handle = dist.new_group(members, timeout=state.timeout) if state.timeout else \
                    dist.new_group(members)
                if state.rank in members:
                    groups[name] = handle
    out = []
    for name, params in sorted(local.items()):
        first = holders[name][0] == state.pp_rank
        for i, p in enumerate(params):  # chunks are in stage order: the first is this rank's lowest stage
            p.stage_copy_primary = first and i == 0
        out.append(StageCopies(name, params, groups.get(name)))
    return out


def is_secondary_copy(p: torch.Tensor) -> bool:
    """A stage copy that is not the primary (skipped by the gradient norm and checkpoints)."""
    return getattr(p, "stage_copy_primary", True) is False
