"""Inference linears on CPU through oneDNN with prepacked weights.

Why: on a CPU, ``F.linear`` calls MKL's sgemm, and generation multiplies a few rows (one per sequence being
decoded) by every weight of the model at every step. oneDNN's inner-product kernel on a weight reordered once
into its blocked layout does the same product 2–4× faster at those shapes on the AVX-512 machines this
project is measured on (``benchmarks/bench_serving.py`` prints the model-level ratio; MKL also takes slower
code paths on non-Intel CPUs). This is what PyTorch's own inference compiler does on CPU (inductor's
``freezing`` swaps linears for ``mkldnn._linear_pointwise`` on a packed weight); here it is done eagerly, so
generation and serving get it without compiling for every batch shape.

How: :func:`pack_linears` turns every plain ``nn.Linear`` of a model on CPU (fp32, or bf16 where oneDNN
supports it) into a :class:`PackedLinear` in place (a class swap, as FSDP2 does: parameters, hooks and state
dict keys are untouched), and gives the tensor-parallel linears a :class:`PackedGemm` as their local
``gemm``. Either runs oneDNN on the packed copy only when autograd is off; with autograd on, on another
device or dtype, it is ``F.linear``. The packed copy is remade if the weight is replaced or changed in place
(its version counter), and :func:`unpack_linears` restores plain linears. The cost is memory: one more copy
of every packed weight. :class:`~mwb.evaluation.lm.LanguageModel` packs for generation, evaluation and
serving on CPU (``pack_weights``); training never does.

Small products stay on ``F.linear``: oneDNN pays about 10 µs per call, so below :data:`MIN_PACKED_MACS`
multiply-adds (rows × in × out) MKL is the faster of the two. The bound is measured, not derived:
``benchmarks/bench_packed_linear.py`` at 1 and 16 rows over widths 64–1536 found oneDNN faster above 2^19
multiply-adds in every shape but one (16 × 256 × 256, 0.77–0.97×), and MKL faster or even below it
(``docs/benchmarks.md``, "Serving").

Results equal ``F.linear``'s within fp32 rounding (a different summation order), not bitwise.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn


MIN_PACKED_MACS = 1 << 19  # rows × in_features × out_features below which F.linear is faster (module docstring)


@functools.lru_cache(maxsize=None)
def packing_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this torch build can run oneDNN's packed linear for ``dtype`` on this CPU (tried once)."""
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    if dtype not in (torch.float32, torch.bfloat16):
        return False
    try:
        w = torch.ones(4, 8, dtype=dtype)
        out = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 8, dtype=dtype),
                                                 torch.ops.mkldnn._reorder_linear_weight(w, None),
                                                 None, "none", [], "")
        return bool((out == 8).all())
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x · Wᵀ + b`` through oneDNN on ``packed`` (``W`` as :meth:`PackedGemm.pack` reordered it)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


class PackedGemm:
    """``gemm(x, weight, bias)`` with a oneDNN-packed copy of ``weight``, remade when the weight passed is
    another tensor or was changed in place; ``F.linear`` when autograd is on, the inputs do not fit, or the
    product is smaller than :data:`MIN_PACKED_MACS`."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.packed: torch.Tensor | None = None
        self.key: tuple = ()
        self.pack(weight)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed tensor behind (oneDNN's opaque tensors have no storage to copy);
        the copy packs its own weight at its first product."""
        return {"packed": None, "key": ()}

    @staticmethod
    def _key(w: torch.Tensor) -> tuple:
        return (w.data_ptr(), w._version, w.dtype, tuple(w.shape))

    def pack(self, weight: torch.Tensor) -> None:
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        self.key = self._key(weight)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if (torch.is_grad_enabled() or x.device.type != "cpu" or weight.device.type != "cpu"
                or x.dtype != weight.dtype or x.numel() * weight.size(0) < MIN_PACKED_MACS
                or not packing_available(weight.dtype)):
            return F.linear(x, weight, bias)
        if self.key != self._key(weight):
            self.pack(weight)
        return packed_product(x, self.packed, bias)


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose product runs through a :class:`PackedGemm` (see the module docstring). Made by
    :func:`pack_linears` from a plain ``nn.Linear``, never constructed directly."""

    packed_gemm: PackedGemm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.packed_gemm(x, self.weight, self.bias)


def _packable(module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return isinstance(w, torch.Tensor) and w.device.type == "cpu" and packing_available(w.dtype)


def pack_linears(model: nn.Module) -> int:
    """Pack, now, every linear of ``model`` on CPU in a packable dtype: plain ``nn.Linear`` modules become
    :class:`PackedLinear`; tensor-parallel linears (a ``gemm`` attribute that is ``F.linear``; an fp8 gemm is
    left alone) get a :class:`PackedGemm`. The number packed (0 when oneDNN cannot run here)."""
    count = 0
    for module in model.modules():
        if not _packable(module):
            continue
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear
            module.packed_gemm = PackedGemm(module.weight)
        elif getattr(module, "gemm", None) is F.linear:
            module.gemm = PackedGemm(module.weight)
        else:
            continue
        count += 1
    return count


def unpack_linears(model: nn.Module) -> int:
    """Undo :func:`pack_linears` (plain linears and ``F.linear`` gemms again, packed copies freed); the number
    undone."""
    count = 0
    for module in model.modules():
        if type(module) is PackedLinear:
            del module.packed_gemm
            module.__class__ = nn.Linear
            count += 1
        elif isinstance(getattr(module, "gemm", None), PackedGemm):
            module.gemm = F.linear
            count += 1
    return count
