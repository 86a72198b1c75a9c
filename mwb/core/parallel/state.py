"""One rank grid, and every process group built from it exactly once.

Ranks are laid out over the dimensions of ``order`` (fastest first; Megatron's default ``tp-cp-ep-dp-pp``
keeps a tensor-parallel group on neighbouring ranks, i.e. inside one node). The expert dimension ``ep`` is
the fastest-varying factor of ``dp``. A group along a dimension holds the ranks whose other coordinates are
equal. With world size 1 (or a size-1 dimension) the group is ``None`` and collectives short-circuit, so
the same model code runs with and without ``torch.distributed``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch.distributed as dist

from .dims import ParallelDims


def _coords(dims: ParallelDims) -> list[dict[str, int]]:
    """Coordinates of every rank: {'tp','cp','dp','pp','ep','edp'}."""
    order = [d for d in dims.order.split("-") if d != "ep"]
    sizes = {"tp": dims.tp, "cp": dims.cp, "dp": dims.dp, "pp": dims.pp}
    out = []
    for rank in range(dims.world_size):
        c, r = {}, rank
        for d in order:
            c[d] = r % sizes[d]
            r //= sizes[d]
        c["ep"] = c["dp"] % dims.ep
        c["edp"] = c["dp"] // dims.ep
        out.append(c)
    return out


def rank_groups(dims: ParallelDims, vary: tuple[str, ...]) -> list[list[int]]:
    """Groups of ranks that differ only in the coordinates ``vary`` (sorted, deterministic)."""
    coords = _coords(dims)
    fixed_keys = [k for k in ("tp", "cp", "pp", "dp", "ep", "edp") if k not in vary]
    if "dp" in vary:  # dp varies ⇒ its ep/edp factors vary too
        fixed_keys = [k for k in fixed_keys if k not in ("ep", "edp")]
    if "ep" in vary or "edp" in vary:
        fixed_keys = [k for k in fixed_keys if k != "dp"]
    buckets: dict[tuple, list[int]] = {}
    for rank, c in enumerate(coords):
        buckets.setdefault(tuple(c[k] for k in fixed_keys), []).append(rank)
    return sorted(buckets.values())


@dataclass
class ParallelState:
    """This rank's coordinates and its process groups (``None`` for a group of one)."""

    dims: ParallelDims
    rank: int = 0
    coords: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    group_ranks: dict = field(default_factory=dict)
    timeout: Optional[object] = None  # collective timeout of every group (for groups made later, too)

    # ---- sizes and ranks
    @property
    def tp_size(self) -> int: return self.dims.tp
    @property
    def pp_size(self) -> int: return self.dims.pp
    @property
    def dp_size(self) -> int: return self.dims.dp
    @property
    def cp_size(self) -> int: return self.dims.cp
    @property
    def ep_size(self) -> int: return self.dims.ep
    @property
    def vpp_size(self) -> int: return self.dims.vpp
    @property
    def tp_rank(self) -> int: return self.coords["tp"]
    @property
    def pp_rank(self) -> int: return self.coords["pp"]
    @property
    def dp_rank(self) -> int: return self.coords["dp"]
    @property
    def cp_rank(self) -> int: return self.coords["cp"]
    @property
    def ep_rank(self) -> int: return self.coords["ep"]
    @property
    def is_first_stage(self) -> bool: return self.pp_rank == 0
    @property
    def is_last_stage(self) -> bool: return self.pp_rank == self.pp_size - 1
    @property
    def sp(self) -> bool: return self.dims.sp

    def group(self, name: str):
        return self.groups.get(name)

    @property
    def tp_group(self): return self.groups.get("tp")
    @property
    def pp_group(self): return self.groups.get("pp")
    @property
    def dp_group(self): return self.groups.get("dp")
    @property
    def cp_group(self): return self.groups.get("cp")
    @property
    def ep_group(self): return self.groups.get("ep")

    def pp_peer(self, offset: int) -> int:
        """Global rank of the pipeline stage ``offset`` away (wrapping), for point-to-point exchange."""
        ranks = self.group_ranks["pp"]
        return ranks[(self.pp_rank + offset) % len(ranks)]


# name → coordinates that vary inside the group
GROUP_SPECS: dict[str, tuple[str, ...]] = {
    "tp": ("tp",),
    "cp": ("cp",),
    "pp": ("pp",),
    "dp": ("dp",),
    "dp_cp": ("dp", "cp"),  # dense-gradient reduction
    "ep": ("ep",),
    "edp": ("edp", "cp"),  # expert-gradient reduction
    "tp_pp": ("tp", "pp"),  # model parallel (grad-norm reduction)
    "tp_ep": ("tp", "ep"),
    "world": ("tp", "cp", "pp", "dp"),
}


def build_state(dims: ParallelDims, rank: Optional[int] = None, timeout=None) -> ParallelState:
    """Create every group once, in the same order on every rank (a ``new_group`` requirement)."""
    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    coords = _coords(dims)[rank]
    state = ParallelState(dims=dims, rank=rank, coords=coords, timeout=timeout)
    distributed = dims.world_size > 1
    if distributed and not dist.is_initialized():
        raise RuntimeError("world size > 1 but torch.distributed is not initialised")
    for name, vary in GROUP_SPECS.items():
        for ranks in rank_groups(dims, vary):
            handle = None
            if distributed and len(ranks) > 1:
                handle = dist.new_group(ranks, timeout=timeout) if timeout else dist.new_group(ranks)
            if rank in ranks:
                state.group_ranks[name] = ranks
                state.groups[name] = handle
    # Embedding group: first and last pipeline stage (tied word embeddings are kept equal over it).
    for ranks in rank_groups(dims, ("pp",)):
        emb = sorted({ranks[0], ranks[-1]})
        handle = None
        if distributed and len(emb) > 1:
            handle = dist.new_group(emb, timeout=timeout) if timeout else dist.new_group(emb)
        if rank in emb:
            state.group_ranks["embedding"] = emb
            state.groups["embedding"] = handle
    return state


def single_process_state() -> ParallelState:
    return build_state(ParallelDims(world_size=1), rank=0)
