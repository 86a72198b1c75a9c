"""RNG streams for tensor parallelism.

Dropout on activations that are replicated over the TP group must draw the same mask on every TP rank (the
default stream, seeded identically on all TP ranks); dropout on activations that are sharded over TP (local
attention heads, sequence-parallel slices) must draw different masks (the "model-parallel" stream, offset by
the TP rank). Both are reproducible from the seed. Activation recomputation snapshots and restores these
states so that recomputed dropout masks are the ones used in the first forward.
"""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from ..models.dropout import Dropout

MODEL_PARALLEL = "model-parallel"


def _get_state(device_type: str) -> torch.Tensor:
    if device_type == "cuda":
        return torch.cuda.get_rng_state()
    return torch.get_rng_state()


def _set_state(state: torch.Tensor, device_type: str) -> None:
    if device_type == "cuda":
        torch.cuda.set_rng_state(state)
    else:
        torch.set_rng_state(state)


class RNGTracker:
    """Named RNG states that can be entered with :meth:`fork` (Megatron's CudaRNGStatesTracker, any device)."""

    def __init__(self, device_type: str = "cpu") -> None:
        self.device_type = device_type
        self.states: dict[str, torch.Tensor] = {}

    def add(self, name: str, seed: int) -> None:
        saved = _get_state(self.device_type)
        if self.device_type == "cuda":
            torch.cuda.manual_seed(seed)
        else:
            torch.manual_seed(seed)
        self.states[name] = _get_state(self.device_type)
        _set_state(saved, self.device_type)

    @contextlib.contextmanager
    def fork(self, name: str = MODEL_PARALLEL):
        if name not in self.states:  # no TP set up: the default stream is the right one
            yield
            return
        saved = _get_state(self.device_type)
        _set_state(self.states[name], self.device_type)
        try:
            yield
        finally:
            self.states[name] = _get_state(self.device_type)
            _set_state(saved, self.device_type)

    def get_states(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.states.items()}

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self.states = {k: v.clone() for k, v in states.items()}


_TRACKER = RNGTracker()


def get_rng_tracker() -> RNGTracker:
    return _TRACKER


def seed_everything(seed: int, tp_rank: int = 0, pp_rank: int = 0, device_type: str = "cpu") -> None:
    """Seed the default stream (same on all TP ranks, offset per pipeline stage like Megatron) and the
    model-parallel stream (offset per TP rank)."""
    global _TRACKER
    base = seed + 100 * pp_rank
    random.seed(base)
    np.random.seed(base % 2**32)
    torch.manual_seed(base)
    if device_type == "cuda":
        torch.cuda.manual_seed(base)
    _TRACKER = RNGTracker(device_type)
    _TRACKER.add(MODEL_PARALLEL, base + 2718 + tp_rank)


def capture_rng_state() -> dict:
    """Every RNG stream of this process (for exact resume)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "tracker": _TRACKER.get_states()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    _TRACKER.set_states(state["tracker"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def model_parallel_rng():
    """Enter the model-parallel stream of the current tracker. The tracker is looked up on each call, not
    when a model is built, because :func:`seed_everything` replaces it."""
    return get_rng_tracker().fork()


class ShardedDropout(Dropout):
    """Dropout on TP-sharded activations: draws from the model-parallel stream."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        with model_parallel_rng():
            return super().forward(x)
