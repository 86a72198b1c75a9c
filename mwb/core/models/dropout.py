"""Dropout that keeps a 1-byte mask for backward, as Korthikanti et al. count it (and CUDA's fused kernel does).

Why: on CPU ``F.dropout`` multiplies by a mask tensor in the activation dtype and autograd keeps that tensor,
2 bytes per element in bf16 (4 in fp32), twice what the activation-memory formula counts. :class:`Dropout`
draws exactly the same mask from the same generator (``bernoulli_(1 - p)`` on a tensor like the input, the
way ATen's CPU dropout does), so outputs and gradients are bit-identical to ``nn.Dropout`` on CPU, but saves
the mask as ``torch.bool``. On CUDA ``F.dropout`` already runs a fused kernel with a 1-byte mask, so there it
is left alone.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _BoolMaskDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        keep = torch.empty_like(x).bernoulli_(1 - p)
        ctx.p = p
        ctx.save_for_backward(keep.bool())
        return x * keep.div_(1 - p)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask.to(g.dtype).div_(1 - ctx.p), None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with a boolean saved mask on CPU (module docstring)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 or not torch.is_grad_enabled() or not x.requires_grad:
        return F.dropout(x, p, training)
    return _BoolMaskDropout.apply(x, p)


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose saved mask is one byte per element (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
