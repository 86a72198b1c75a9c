"""fp32 autograd functions for the element-wise parts of a Llama block, written to touch memory less.

Why: on a CPU, eager training spends about an eighth of a Llama-shape step (SmolLM2-135M) in element-wise
work, and most of that is allocating fresh tensors and streaming them through memory, not arithmetic.
Written with plain tensor ops, RoPE makes four full temporaries (``cat``, ``neg``, two products) and
``nn.RMSNorm``'s composite backward a dozen small kernels. Each function here does the same arithmetic in
as few passes as its formula allows and saves only what backward needs. They take fp32 only; 16-bit
inputs keep torch's paths (which compute in fp32 and cast). Values and gradients are tested against the
textbook formulas (``tests/core/models/test_fused.py``); ``benchmarks/bench_step_changes.py`` times them.
"""
from __future__ import annotations

import torch
from torch import nn


class _Rotary(torch.autograd.Function):
    """x·cos + rotate_half(x)·sin for fp32 ``x``, in three kernels and one allocation each way.

    Why: written with ``cat``/``neg`` it makes four full temporaries and autograd saves two of them; on a CPU
    those fresh allocations and passes over memory cost more than the multiplies (a few % of a Llama-shape
    step). Backward is the transposed rotation, g·cos + rotate_halfᵀ(g·sin), and saves only the tables."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        h = x.size(-1) // 2
        out = x * cos
        out[..., :h].addcmul_(x[..., h:], sin[..., :h], value=-1.0)
        out[..., h:].addcmul_(x[..., :h], sin[..., h:])
        return out

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        h = g.size(-1) // 2
        grad = g * cos
        grad[..., :h].addcmul_(g[..., h:], sin[..., h:])
        grad[..., h:].addcmul_(g[..., :h], sin[..., :h], value=-1.0)
        return grad, None, None


def rotary_fp32(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin for fp32 ``x [..., d]`` and tables broadcastable to it."""
    return _Rotary.apply(x, cos, sin)


class _RMSNorm(torch.autograd.Function):
    """y = x̂·w with x̂ = x / sqrt(mean(x²) + eps). Saves x̂ and 1/rms; backward is
    dx = (g·w − x̂·mean(g·w·x̂)) / rms and dw = Σ g·x̂ over tokens: five passes instead of about twelve."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        # ‖x‖² / d from one fused reduction: no squared copy of x
        rstd = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.size(-1)).add_(eps).rsqrt_()
        xhat = x * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, g):
        xhat, rstd, weight = ctx.saved_tensors
        grad_w = (g * xhat).reshape(-1, xhat.size(-1)).sum(0)
        gw = g * weight
        dot = (gw * xhat).mean(-1, keepdim=True)
        return gw.addcmul_(xhat, dot, value=-1.0).mul_(rstd), grad_w, None


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` (same parameters, state dict and ``isinstance``) that takes :class:`_RMSNorm` for fp32
    input and weight; anything else goes to ``nn.RMSNorm``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w is not None and x.dtype == torch.float32 and w.dtype == torch.float32 and self.eps is not None:
            return _RMSNorm.apply(x, w, self.eps)
        return super().forward(x)
