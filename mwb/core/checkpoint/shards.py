"""Where a rank's tensor sits inside the global tensor, and how to go back and forth.

A checkpoint never stores a layout-specific tensor without saying which rectangle of the *global* tensor it
is. Every parameter carries its sharding (``tp_dim``/``tp_rank``/``full_shape`` from the tensor-parallel
pass, ``ep_slice`` for experts), so a shard is described by per-dimension ``offsets`` plus its ``shape``.
Reading reverses it: place every saved rectangle into the global tensor, drop vocabulary padding, pad again
for the new layout and cut the new rank's slice with :func:`mwb.core.models.init.shard_of` — the same
function the initialiser uses, so a resharded parameter is exactly what that layout would have held.

Vocabulary padding (rows beyond the real vocabulary, a multiple of 128·tp) depends on tp, so it is never
part of a tensor's global shape: ``shape`` is unpadded, ``padded_shape`` is the space the saved offsets
live in (``full_shape`` of the layout that wrote them).
"""
from __future__ import annotations

import math
import re
from typing import Optional

import torch

from ..errors import CheckpointError

# Parameters whose first dimension is the (padded) vocabulary.
VOCAB_PARAM = re.compile(r"(^|\.)(embed\.word|head)\.(weight|bias)$")


def canonical(name: str, tied: bool) -> str:
    """The name a parameter is stored under: a tied output-head copy is the word embedding (the same rule
    the initialiser uses, so ``binary_head.weight`` stays itself)."""
    from ..models.init import canonical_name
    return canonical_name(name, tied)


def full_shape(p: torch.Tensor) -> tuple[int, ...]:
    return tuple(getattr(p, "full_shape", None) or p.shape)


def unpadded_shape(name: str, p: torch.Tensor, vocab: Optional[int]) -> tuple[int, ...]:
    """Global shape of ``p`` without vocabulary padding."""
    shape = full_shape(p)
    if vocab is not None and VOCAB_PARAM.search(name) and shape and shape[0] > vocab:
        return (vocab,) + shape[1:]
    return shape


def describe(p: torch.Tensor) -> dict:
    """The rectangle of the (padded) global tensor that this rank's ``p`` holds, and why.

    Mirrors :func:`mwb.core.models.init.shard_of`: expert rows ``ep_slice`` first, then the TP chunk.
    """
    full = full_shape(p)
    offsets = [0] * p.dim()
    after_ep = list(full)
    ep = getattr(p, "ep_slice", None)
    if ep is not None:
        offsets[0] += int(ep[0])
        after_ep[0] = int(ep[1]) - int(ep[0])
    tp = None
    dim = getattr(p, "tp_dim", None)
    if dim is not None and after_ep[dim] != p.shape[dim]:
        size = after_ep[dim] // p.shape[dim]
        rank = int(getattr(p, "tp_rank", 0))
        offsets[dim] += rank * p.shape[dim]
        tp = {"dim": int(dim), "rank": rank, "size": int(size)}
    return {"offsets": offsets, "shape": list(p.shape), "tp": tp,
            "ep": [int(ep[0]), int(ep[1])] if ep is not None else None}


def region(offsets, shape) -> tuple[slice, ...]:
    return tuple(slice(int(o), int(o) + int(s)) for o, s in zip(offsets, shape))


def volume(shape) -> int:
    return int(math.prod(int(s) for s in shape))


def assemble(padded_shape, shape, parts, dtype) -> torch.Tensor:
    """The unpadded global tensor from ``parts`` = [(offsets, tensor)] placed in ``padded_shape``."""
    out = torch.zeros(tuple(padded_shape), dtype=dtype)
    for offsets, t in parts:
        out[region(offsets, t.shape)] = t.to(dtype)
    if list(shape) != list(padded_shape):
        out = out[region([0] * len(shape), shape)].clone()
    return out


def pad_to(t: torch.Tensor, shape) -> torch.Tensor:
    """Zero-pad ``t`` at the end of each dimension to ``shape`` (the vocabulary padding of a layout)."""
    shape = tuple(shape)
    if tuple(t.shape) == shape:
        return t
    if len(shape) != t.dim() or any(a > b for a, b in zip(t.shape, shape)):
        raise CheckpointError(f"cannot pad a tensor of shape {list(t.shape)} to {list(shape)}")
    out = torch.zeros(shape, dtype=t.dtype)
    out[region([0] * t.dim(), t.shape)] = t
    return out


def local_slice(full: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """This rank's piece of the unpadded global tensor ``full`` for parameter ``p``."""
    from ..models.init import shard_of
    out = shard_of(pad_to(full, full_shape(p)), p)
    if tuple(out.shape) != tuple(p.shape):
        raise CheckpointError(f"resharding produced shape {list(out.shape)} for a parameter of shape "
                              f"{list(p.shape)}")
    return out


def coverage_error(padded_shape, rects) -> Optional[str]:
    """Why the rectangles ``[(offsets, shape)]`` do not tile ``padded_shape`` exactly, or None.

    Checks bounds and total volume; with in-bounds rectangles from a grid split that is enough to detect
    a missing or duplicated piece without materialising anything.
    """
    total = 0
    for offsets, shape in rects:
        if len(offsets) != len(padded_shape) or len(shape) != len(padded_shape):
            return f"a piece of rank {len(shape)} in a tensor of rank {len(padded_shape)}"
        for o, s, full in zip(offsets, shape, padded_shape):
            if o < 0 or o + s > full:
                return f"piece at {list(offsets)} of shape {list(shape)} lies outside {list(padded_shape)}"
        total += volume(shape)
    want = volume(padded_shape)
    if total != want:
        return f"pieces hold {total} of {want} elements"
    return None
