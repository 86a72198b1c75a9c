"""Layout-independent initialisation.

Every parameter is drawn as its *full* tensor from a generator seeded by (seed, parameter name), then this
rank's TP shard is sliced out. So a model split over any TP/PP/EP layout starts from exactly the weights of
the single-process model, which is what the equivalence tests compare against, and no rank ever holds more
than one full parameter at a time. Megatron's scheme: normal(0, std) for weights, std/√(2·layers) for the
output projections of each residual branch, zeros for biases, ones for norm weights.
"""
from __future__ import annotations

import hashlib
import math
import re

import torch
from torch import nn

_SCALED = re.compile(r"(o_proj|down_proj)\.weight$|experts\.w2$|shared_expert\.down_proj\.weight$")


def _seed_for(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator_for(seed: int, name: str) -> torch.Generator:
    """The generator parameter ``name`` is drawn from: the same on every rank and in every layout."""
    return torch.Generator().manual_seed(_seed_for(seed, name))


def is_output_head(name: str) -> bool:
    """The LM output projection (``head.weight``), not e.g. a ``binary_head.weight``."""
    return name == "head.weight" or name.endswith(".head.weight")


def is_word_embedding(name: str) -> bool:
    return name == "embed.word.weight" or name.endswith(".embed.word.weight")


def canonical_name(name: str, tied: bool) -> str:
    """Parameters that are copies of another share its name for initialisation (tied output head)."""
    if tied and is_output_head(name):
        return name[: -len("head.weight")] + "embed.word.weight"
    return name


def full_init(name: str, shape: tuple, std: float, num_layers: int, seed: int, real_rows: int | None = None,
              expert_offset: int = 0) -> torch.Tensor:
    """The full fp32 value of parameter ``name`` (``real_rows`` < shape[0] zero-pads a padded vocab)."""
    leaf = name.rsplit(".", 1)[-1]
    if re.search(r"(ln\w*|norm)\.weight$", name) or name.endswith("layernorm.weight"):
        return torch.ones(shape)
    if leaf == "bias" or re.search(r"(ln\w*|norm)\.bias$", name):
        return torch.zeros(shape)
    g = generator_for(seed, name)
    s = std / math.sqrt(2.0 * num_layers) if _SCALED.search(name) else std
    rows = shape[0] if real_rows is None else real_rows
    out = torch.zeros(shape)
    out[:rows].normal_(0.0, s, generator=g)
    return out


@torch.no_grad()
def initialize(model: nn.Module, seed: int, std: float, num_layers: int, tied: bool,
               real_vocab: int | None = None) -> None:
    """Fill every parameter of ``model`` (any layout) with its slice of the full initial value."""
    seen = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        full_shape = getattr(p, "full_shape", tuple(p.shape))
        canon = canonical_name(name, tied)
        vocab_rows = real_vocab if (canon.endswith("word.weight") or is_output_head(canon)) else None
        full = full_init(canon, full_shape, std, num_layers, seed, vocab_rows)
        p.copy_(shard_of(full, p).to(p.dtype))


def shard_of(full: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """This rank's slice of ``full`` for parameter ``p`` (TP dimension and, for experts, EP rows)."""
    out = full
    ep = getattr(p, "ep_slice", None)
    if ep is not None:
        out = out[ep[0]:ep[1]]
    dim = getattr(p, "tp_dim", None)
    if dim is not None and out.shape[dim] != p.shape[dim]:
        n = out.shape[dim] // p.shape[dim]
        out = out.chunk(n, dim=dim)[getattr(p, "tp_rank", 0)]
    return out
