"""Build a model for this rank: plain module on the meta device → parallelize → materialize → initialise.

Building on the meta device first means no rank ever allocates the unsharded model; parallelisation only
swaps modules, and :func:`materialize` then allocates each (sharded) parameter once, keeping tied
parameters tied and the sharding metadata attached.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch import nn

from ..config import ModelConfig
from ..parallel.tensor_parallel import parallelize_tensor
from .init import initialize
from .transformer import padded_vocab_size

# arch → constructor(cfg, vocab_size, padded_vocab_size, layer_ids, pre_process, post_process)
ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {}


def register_arch(name: str):
    def deco(fn):
        ARCHITECTURES[name] = fn
        return fn
    return deco


@register_arch("gpt")
def _gpt(cfg, vocab, padded, layer_ids, pre, post):
    from .gpt import GPTModel
    return GPTModel(cfg, vocab, padded, layer_ids, pre, post)


def _load_arch(name: str) -> Callable[..., nn.Module]:
    if name not in ARCHITECTURES:
        import importlib
        for mod in ("bert", "t5"):
            try:
                importlib.import_module(f"mwb.core.models.{mod}")
            except ImportError:
                pass
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown model arch '{name}' (known: {', '.join(sorted(ARCHITECTURES))})")
    return ARCHITECTURES[name]


@torch.no_grad()
def materialize(model: nn.Module, device, dtype: Optional[torch.dtype] = None) -> nn.Module:
    """Replace meta parameters/buffers by real (uninitialised) ones, keeping ties and attributes."""
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in made:
                want = dtype if (dtype is not None and p.is_floating_point()) else p.dtype
                new = nn.Parameter(torch.empty(p.shape, device=device, dtype=want), requires_grad=p.requires_grad)
                new.__dict__.update(p.__dict__)
                made[id(p)] = new
            module._parameters[key] = made[id(p)]
        for key, b in list(module._buffers.items()):
            if b is not None and b.device.type == "meta":
                module._buffers[key] = torch.zeros(b.shape, device=device, dtype=b.dtype)
    return model


def build_model(cfg: ModelConfig, state, vocab_size: int, seed: int, device="cpu",
                dtype: Optional[torch.dtype] = None, layer_ids: Optional[Sequence[int]] = None,
                pre_process: bool = True, post_process: bool = True) -> nn.Module:
    """The model (or pipeline stage) for this rank, initialised identically to the single-process model."""
    padded = padded_vocab_size(vocab_size, cfg.make_vocab_size_divisible_by, state.tp_size)
    ctor = _load_arch(cfg.arch)
    model = construct_sharded(lambda: ctor(cfg, vocab_size, padded, layer_ids, pre_process, post_process),
                              cfg, state, device, dtype)
    initialize(model, seed, cfg.init_std, cfg.num_layers, cfg.tie_embeddings, real_vocab=vocab_size)
    return model


def construct_sharded(make: Callable[[], nn.Module], cfg: ModelConfig, state, device,
                      dtype: Optional[torch.dtype] = None) -> nn.Module:
    """``make()`` on the meta device, parallelised for this rank (tensor/sequence, context and expert
    plans), then given real, uninitialised storage: the caller initialises it (:func:`initialize`)."""
    with torch.device("meta"):
        model = make()
    parallelize_tensor(model, state)
    if state.cp_size > 1:
        from ..parallel.context import parallelize_context
        parallelize_context(model, state)
    if cfg.num_experts:
        from ..parallel.expert import parallelize_experts
        parallelize_experts(model, state)
    return materialize(model, device, dtype)


def count_parameters(model: nn.Module) -> int:
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n
