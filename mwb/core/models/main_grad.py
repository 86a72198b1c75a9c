"""Megatron's gradient-accumulation fusion: the weight gradients of the plain linear layers, the word
embedding and the fused output layer are written straight into the optimizer's fp32 ``main_grad`` instead of
travelling through autograd.

Why: the word embedding and the output layer are the largest weights of a small model ([49,152 × 576] at
SmolLM2-135M, 108 MB in fp32). On the usual route each of them costs a fresh gradient tensor per step (the
embedding's is zero-filled first), autograd sums the two when they are tied, and the optimizer's hook copies
or adds the result into ``main_grad``: three 108 MB tensors born and freed every step, and on a CPU the
page faults of that fresh memory cost more than the arithmetic. Written in place, the output layer's
gradient is one ``addmm`` into ``main_grad`` and the embedding's one ``index_add_``. The blocks' linear
layers save the same AccumulateGrad call and copy per weight (1–3% of a SmolLM2-135M step on 2 cores).

The contract with :mod:`mwb.core.optim.buffers`: a trained parameter carries ``main_grad`` (same shape and
dtype, a view into the flat gradient buffer) and ``main_grad_stale`` (True: nothing has been accumulated this
step, so overwrite). Everything else (no ``main_grad``, a 16-bit model whose ``main_grad`` is fp32) takes the
usual route, and the optimizer's hook sees those gradients as before. As in Megatron, a fused weight's
gradient is only in ``main_grad``: ``torch.autograd.grad`` with respect to it sees none.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


ENABLED = True  # False sends every gradient through autograd (benchmarks/bench_step_changes.py compares)


def writes_main_grad(param: torch.Tensor) -> bool:
    """Whether this parameter's gradient may be written straight into its ``main_grad``."""
    main = getattr(param, "main_grad", None)
    return ENABLED and main is not None and main.dtype == param.dtype and main.shape == param.shape


def weight_grad(param: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Optional[torch.Tensor]:
    """The gradient ``a @ b`` of a weight: added to ``param.main_grad`` without a temporary (``=`` while the
    slice is stale), returning None for autograd, when :func:`writes_main_grad`; else returned."""
    if not writes_main_grad(param):
        return a.mm(b)
    if param.main_grad_stale:
        torch.mm(a, b, out=param.main_grad)
        param.main_grad_stale = False
    else:
        param.main_grad.addmm_(a, b)
    return None


def add_rows(param: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """``param.main_grad[index[i]] += rows[i]`` for every i (a stale slice is zeroed first). On a GPU, where
    ``index_add_`` sums repeated rows in no fixed order, through the embedding's own deterministic backward."""
    main = param.main_grad
    if main.device.type != "cpu":
        dense = _dense_grad(index, rows, main.size(0))
        main.copy_(dense) if param.main_grad_stale else main.add_(dense)
    else:
        if param.main_grad_stale:
            main.zero_()
        main.index_add_(0, index, rows)
    param.main_grad_stale = False


def _dense_grad(index: torch.Tensor, rows: torch.Tensor, num: int) -> torch.Tensor:
    """The gradient autograd gives ``F.embedding``'s weight: rows summed into a [num, h] zero tensor."""
    return torch.ops.aten.embedding_dense_backward(rows, index, num, -1, False)


class _Embedding(torch.autograd.Function):
    """``F.embedding(ids, weight)`` whose weight gradient goes to ``main_grad`` when it can (module docstring)."""

    @staticmethod
    def forward(ctx, ids, weight):
        ctx.save_for_backward(ids)
        ctx.weight = weight
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, g):
        (ids,) = ctx.saved_tensors
        weight = ctx.weight
        index, rows = ids.reshape(-1), g.reshape(-1, g.size(-1))
        if writes_main_grad(weight):
            add_rows(weight, index, rows)
            return None, None
        return None, _dense_grad(index, rows, weight.size(0))


class _Linear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` whose weight gradient goes to ``main_grad`` (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        g2, x2 = g.reshape(-1, g.size(-1)), x.reshape(-1, x.size(-1))
        gx = torch.matmul(g, weight) if ctx.needs_input_grad[0] else None
        gw = weight_grad(weight, g2.t(), x2) if ctx.needs_input_grad[1] else None
        gb = None
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb


def unhooked(module: nn.Module, cls: type) -> bool:
    """``module`` is exactly ``cls`` (not a parallel or adapter subclass) and nothing hooks its forward."""
    return (type(module) is cls and not module._forward_hooks and not module._forward_pre_hooks
            and not nn.modules.module._global_forward_hooks and not nn.modules.module._global_forward_pre_hooks)


def linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``; a plain ``nn.Linear`` whose weight has a ``main_grad`` to write to goes through
    :class:`_Linear` (eager only: a compiled block keeps autograd's linear, which inductor fuses itself)."""
    if _fusable(module, nn.Linear):
        return _Linear.apply(x, module.weight, module.bias)
    return module(x)


def embedding(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """``module(ids)``; a plain ``nn.Embedding`` (no padding row, max-norm or sparse gradient) whose weight
    has a ``main_grad`` to write to goes through :class:`_Embedding`."""
    if _fusable(module, nn.Embedding) and module.padding_idx is None and module.max_norm is None \
            and not module.sparse:
        return _Embedding.apply(ids, module.weight)
    return module(ids)


def _fusable(module: nn.Module, cls: type) -> bool:
    """An unhooked ``cls`` being trained in eager mode, whose weight has a ``main_grad`` of its dtype."""
    return (unhooked(module, cls) and torch.is_grad_enabled() and module.weight.requires_grad
            and writes_main_grad(module.weight) and not torch.compiler.is_compiling())
