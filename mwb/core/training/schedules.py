"""Forward/backward schedules over the micro-batches of one optimizer step.

Without pipeline parallelism this is plain gradient accumulation: each micro-batch runs forward and
backward in turn, gradients add up in the fp32 main-grad buffer. Pipeline schedules (1F1B, interleaved)
live in :mod:`mwb.core.pipeline` and share this signature; :func:`get_schedule` picks one for the layout.
"""
from __future__ import annotations

from typing import Callable

import torch


def forward_backward_no_pipelining(chunks, microbatches, spec, state, loss_factor: float,
                                   forward_only: bool = False, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (Σ loss_sum, Σ token_count) over the micro-batches, detached. ``loss_factor`` scales the
    loss before backward (loss scale / nominal token count)."""
    (model,) = chunks
    device = next(model.parameters()).device
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.float64, device=device)
    for mb in microbatches:
        with torch.set_grad_enabled(not forward_only):
            loss_sum, n = spec.forward(model, mb)
            if not forward_only:
                (loss_sum * loss_factor).backward()
        total += loss_sum.detach().double()
        count += n.detach().double()
    return total, count


def get_schedule(state) -> Callable:
    if state.pp_size == 1:
        return forward_backward_no_pipelining
    from ..pipeline.schedules import get_pipeline_schedule
    return get_pipeline_schedule(state)
