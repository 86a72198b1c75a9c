"""Context parallelism: the sequence split over ``cp`` ranks, attention over all of it.

Each CP rank holds 2 of the sequence's 2·cp chunks, ``r`` and ``2·cp−1−r`` (the load-balanced "zigzag"
split: under a causal mask every rank then has the same amount of attention work). Everything but attention
is token-local, so only attention communicates: keys and values are all-gathered over the CP group (the
backward reduce-scatters their gradients) and a causal mask is built from the tokens' global positions.
This is the all-gather form of context parallelism (as in Llama 3 training) rather than ring attention: simpler,
and the same result; its memory for K/V grows with the full sequence.
"""
from __future__ import annotations

import torch

from ..models.transformer import AttentionCore
from .collectives import gather_from_sequence, group_rank, group_size


def zigzag_positions(seq_local: int, rank: int, size: int, device=None) -> torch.Tensor:
    """Global positions of the tokens a CP rank holds (its two chunks, in order)."""
    c = seq_local // 2
    first = torch.arange(rank * c, (rank + 1) * c, device=device)
    second = torch.arange((2 * size - 1 - rank) * c, (2 * size - rank) * c, device=device)
    return torch.cat([first, second])


def zigzag_slice(x: torch.Tensor, rank: int, size: int, dim: int = 1) -> torch.Tensor:
    """This rank's two chunks of the full-sequence tensor ``x``."""
    chunks = x.chunk(2 * size, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * size - 1 - rank]], dim=dim)


class ContextParallel:
    """Attached to attention cores and the model: the CP group and this rank's coordinates."""

    def __init__(self, group) -> None:
        self.group = group
        self.rank, self.size = group_rank(group), group_size(group)

    def gather_kv(self, k: torch.Tensor, v: torch.Tensor, causal: bool):
        """Keys/values of the whole sequence (``[b, heads, s, d]``) and the causal mask for local queries."""
        sq = k.size(2)
        k_all = gather_from_sequence(k.contiguous(), self.group, dim=2)
        v_all = gather_from_sequence(v.contiguous(), self.group, dim=2)
        mask = None
        if causal:
            qpos = zigzag_positions(sq, self.rank, self.size, k.device)
            kpos = torch.cat([zigzag_positions(sq, r, self.size, k.device) for r in range(self.size)])
            mask = kpos[None, :] <= qpos[:, None]
        return k_all, v_all, mask


def parallelize_context(model: torch.nn.Module, state) -> torch.nn.Module:
    """Give every attention core (and the model) the CP group; a no-op when cp == 1."""
    group = state.group("cp")
    if group_size(group) == 1:
        return model
    cp = ContextParallel(group)
    for module in model.modules():
        if isinstance(module, AttentionCore):
            module.cp = cp
    model.cp = cp
    return model
