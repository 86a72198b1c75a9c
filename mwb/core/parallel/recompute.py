"""Activation recomputation: trade compute for activation memory by re-running parts of the forward pass
during backward instead of keeping their intermediate tensors.

* ``full``: whole transformer layers are checkpointed; only their inputs are kept. ``uniform`` checkpoints
  every ``recompute_num_layers`` consecutive layers of a chunk as one unit (fewer kept inputs, more
  recomputation per unit); ``block`` checkpoints only the first ``recompute_num_layers`` layers, each on
  its own, and keeps the rest (for when memory is short by only a few layers). This is Megatron's
  ``--recompute-granularity full --recompute-method uniform|block``.
* ``selective``: only the attention core (softmax(QKᵀ)·V with its dropout) is checkpointed. Its activations
  grow with s²·heads but it costs few FLOPs, so recomputing just it removes most activation memory at a
  few percent of compute (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models").

Recomputation must replay dropout bit-exactly, or gradients silently differ from the non-recomputed run.
``torch.utils.checkpoint`` (non-reentrant) restores the default CPU/CUDA generator with
``preserve_rng_state=True``; dropout on tensor-parallel-sharded activations draws from the separate
model-parallel stream of :class:`~mwb.core.parallel.random.RNGTracker`, which checkpoint knows nothing
about. :func:`_rng_context` snapshots the tracker's states when the checkpointed forward runs and puts that
snapshot back for the recomputation (restoring the live states afterwards), so both streams replay.

Layers are wrapped in place by giving the module an instance-level ``forward``; parameter names, hooks on
submodules (tensor-parallel region boundaries) and state dicts are unchanged.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..models.transformer import AttentionCore
from .random import get_rng_tracker

MODES = ("none", "selective", "full")
METHODS = ("uniform", "block")


def _rng_context():
    """checkpoint ``context_fn``: (context for the first forward, context for the recomputation)."""
    tracker = get_rng_tracker()
    snapshot = tracker.get_states()

    @contextlib.contextmanager
    def recompute():
        live = tracker.get_states()
        tracker.set_states(snapshot)
        try:
            yield
        finally:
            tracker.set_states(live)
    return contextlib.nullcontext(), recompute()


def checkpointed(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` with its activations recomputed in backward, RNG streams replayed."""
    return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True, context_fn=_rng_context,
                      **kwargs)


def _should_checkpoint(module: nn.Module, kwargs: dict) -> bool:
    """Only while training with autograd on; never with a KV cache (incremental decoding)."""
    return module.training and torch.is_grad_enabled() and kwargs.get("cache") is None


# ---------------------------------------------------------------------------------------------- wrapping


def _wrap_single(module: nn.Module) -> None:
    orig = module.forward

    def forward(*args, **kwargs):
        if _should_checkpoint(module, kwargs):
            return checkpointed(orig, *args, **kwargs)
        return orig(*args, **kwargs)
    module.forward = forward


def _wrap_group(layers: list[nn.Module]) -> None:
    """Checkpoint consecutive ``layers`` as one unit. The model calls them one after another: the first
    call runs the whole group under one checkpoint, the calls of the others that follow pass through."""
    if len(layers) == 1:
        _wrap_single(layers[0])
        return
    origs = [m.forward for m in layers]
    state = {"skip": 0}

    def run_group(x, *args, **kwargs):
        for f in origs:
            x = f(x, *args, **kwargs)
        return x

    def first(x, *args, **kwargs):
        if _should_checkpoint(layers[0], kwargs):
            state["skip"] = len(layers) - 1
            return checkpointed(run_group, x, *args, **kwargs)
        state["skip"] = 0
        return origs[0](x, *args, **kwargs)
    layers[0].forward = first

    for m, orig in zip(layers[1:], origs[1:]):
        def forward(x, *args, _orig=orig, **kwargs):
            if state["skip"] > 0:
                state["skip"] -= 1
                return x  # already computed inside the group's checkpoint
            return _orig(x, *args, **kwargs)
        m.forward = forward


def layer_stacks(chunk: nn.Module) -> list[list[nn.Module]]:
    """The transformer layer stacks of a model chunk (``layers``; ``encoder.layers`` / ``decoder.layers``
    for encoder-decoder models), each in execution order."""
    stacks = []
    for name, mod in chunk.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(mod, (nn.ModuleDict, nn.ModuleList)):
            stacks.append(list(mod.values()) if isinstance(mod, nn.ModuleDict) else list(mod))
    return stacks


def apply_recompute(chunk: nn.Module, parallel_cfg) -> nn.Module:
    """Apply ``parallel_cfg.recompute`` (none | selective | full, with ``recompute_method`` and
    ``recompute_num_layers``) to one model chunk, in place."""
    mode = parallel_cfg.recompute
    method = getattr(parallel_cfg, "recompute_method", "uniform")
    n = int(getattr(parallel_cfg, "recompute_num_layers", 1))
    if mode not in MODES:
        raise ValueError(f"parallel.recompute must be one of {', '.join(MODES)}, got '{mode}'")
    if mode == "none":
        return chunk
    if getattr(chunk, "_mwb_recompute", None):
        raise RuntimeError(f"recomputation ({chunk._mwb_recompute}) is already applied to this model")
    chunk._mwb_recompute = mode
    if mode == "selective":
        cores = [m for m in chunk.modules() if isinstance(m, AttentionCore)]
        for core in cores:
            _wrap_single(core)
        return chunk
    if method not in METHODS:
        raise ValueError(f"parallel.recompute_method must be one of {', '.join(METHODS)}, got '{method}'")
    if n < 1:
        raise ValueError(f"parallel.recompute_num_layers must be at least 1, got {n}")
    for layers in layer_stacks(chunk):
        if method == "uniform":
            for i in range(0, len(layers), n):
                _wrap_group(layers[i:i + n])
        else:
            for layer in layers[:n]:
                _wrap_single(layer)
    return chunk
