"""fp8 GEMMs for the transformer blocks' linear layers: Megatron's "tensorwise" recipe on ``torch._scaled_mm``.

What ``--precision fp8`` changes, and what it keeps:

* weights stay bf16 with fp32 master copies in the optimizer, exactly as in bf16 mode; fp8 copies of a
  weight and of an activation are made on the fly for each GEMM (per forward, never stored between steps);
* forward operands (activations, weights) are cast to e4m3 (3 mantissa bits, max 448), the gradient of the
  output to e5m2 (2 mantissa bits, max 57,344; the wider range gradients need);
* per-tensor *current* (dynamic) scaling: each tensor is multiplied by ``fp8_max / amax`` of itself just
  before the cast (no amax history), and the GEMM multiplies its fp32 accumulator by the two inverse scales;
* the first and last transformer layers, the embedding, the output layer, attention's softmax·V, norms and
  adapters stay bf16 (Megatron's ``--first-last-layers-bf16``; the layers most sensitive to fp8).

On a GPU that has fp8 tensor cores (compute capability 8.9+), the GEMM is ``torch._scaled_mm``: the forward
``x·Wᵀ`` (e4m3 × e4m3), the input gradient ``g·W`` and the weight gradient ``gᵀ·x`` (e5m2 × e4m3),
accumulated in fp32. Elsewhere (a CPU, an older GPU, or a GEMM whose sizes are not multiples of 16, which
``_scaled_mm`` requires) the same casts and scales run in emulation: the fp8 values are cast back to bf16,
which holds them exactly, and multiplied with fp32 accumulation, so the numerics match and only the speed
differs. The CUDA path has not been run on a GPU in this project yet.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ConfigError
from .mlp import MLP
from .transformer import Attention, TransformerBlock

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj")


def quantize(x: torch.Tensor, dtype: torch.dtype = E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale_inv)``: ``x`` scaled by ``fp8_max / amax(|x|)`` and cast to ``dtype``; ``q · scale_inv``
    gives ``x`` back to within the format's rounding."""
    fmax = FP8_MAX[dtype]
    amax = x.detach().abs().amax().float().clamp(min=1e-12)
    scale = fmax / amax
    q = (x.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.reciprocal()


def dequantize(q: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return (q.float() * scale_inv).to(dtype)


@functools.lru_cache(maxsize=None)
def _device_has_fp8(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (8, 9) and hasattr(torch, "_scaled_mm")


def native(device: torch.device) -> bool:
    """Whether GEMMs on ``device`` run in fp8 hardware (else they are emulated)."""
    device = torch.device(device)
    return device.type == "cuda" and _device_has_fp8(device.index if device.index is not None
                                                      else torch.cuda.current_device())


def scaled_mm(a: torch.Tensor, scale_a: torch.Tensor, b: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype) -> torch.Tensor:
    """``(a · b) · scale_a · scale_b`` for fp8 ``a [M, K]`` and ``b [K, N]``, accumulated in fp32."""
    m, k = a.shape
    n = b.shape[1]
    if native(a.device) and m % 16 == 0 and k % 16 == 0 and n % 16 == 0:
        # _scaled_mm wants a row-major and b column-major
        return torch._scaled_mm(a.contiguous(), b.t().contiguous().t(), scale_a=scale_a, scale_b=scale_b,
                                out_dtype=out_dtype)
    out = a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()  # exact bf16 operands, fp32 sums
    return (out * (scale_a * scale_b)).to(out_dtype)


class _Fp8Linear(torch.autograd.Function):
    """``x·Wᵀ + b`` with fp8 operands in forward and backward (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        shape = x.shape
        xq, sx = quantize(x.reshape(-1, shape[-1]), E4M3)
        wq, sw = quantize(weight, E4M3)
        y = scaled_mm(xq, sx, wq.t(), sw, x.dtype)
        if bias is not None:
            y = y + bias
        ctx.save_for_backward(xq, sx, wq, sw)
        ctx.weight, ctx.has_bias, ctx.in_shape = weight, bias is not None, shape
        return y.view(*shape[:-1], -1)

    @staticmethod
    def backward(ctx, g):
        xq, sx, wq, sw = ctx.saved_tensors
        g2 = g.reshape(-1, g.size(-1))
        gq, sg = quantize(g2, E5M2)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = scaled_mm(gq, sg, wq, sw, g.dtype).view(ctx.in_shape)
        if ctx.needs_input_grad[1]:
            gw = _weight_grad(ctx.weight, scaled_mm(gq.t(), sg, xq, sx, torch.float32))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb


def _weight_grad(weight: torch.Tensor, gw: torch.Tensor):
    """The fp32 weight gradient goes straight into the optimizer's fp32 ``main_grad`` when the weight has
    one (as transformer-engine's fused wgrad accumulation does); else it is returned in the weight's dtype."""
    main = getattr(weight, "main_grad", None)
    if main is None or main.shape != gw.shape:
        return gw.to(weight.dtype)
    if weight.main_grad_stale:
        main.copy_(gw)
        weight.main_grad_stale = False
    else:
        main.add_(gw)
    return None


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """``F.linear`` through fp8 GEMMs (a drop-in for the ``gemm`` of the tensor-parallel linear layers)."""
    return _Fp8Linear.apply(x, weight, bias)


class Fp8Linear(nn.Linear):
    """An ``nn.Linear`` whose matmuls are fp8 (:func:`apply_fp8` switches plain linear layers to it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_linear(x, self.weight, self.bias)


def apply_fp8(model: nn.Module, num_layers: int) -> int:
    """Make the linear layers of every transformer block except the first and the last (layer ids 0 and
    ``num_layers − 1``) compute in fp8; returns how many. A plain ``nn.Linear`` becomes :class:`Fp8Linear`
    (same parameters); a tensor-parallel one gets :func:`fp8_linear` as its ``gemm``."""
    n = 0
    for block in model.modules():
        if not isinstance(block, TransformerBlock) or block.layer_id not in fp8_layers(num_layers):
            continue
        for module in block.modules():
            if not isinstance(module, (Attention, MLP)):
                continue
            for name in LINEARS:
                linear = getattr(module, name, None)
                if type(linear) is nn.Linear:
                    linear.__class__ = Fp8Linear
                    n += 1
                elif linear is not None and hasattr(linear, "gemm"):
                    linear.gemm = fp8_linear
                    n += 1
    return n


def fp8_layers(num_layers: int) -> list[int]:
    """The layer ids :func:`apply_fp8` computes in fp8: every layer but the first and the last."""
    return [i for i in range(num_layers) if i not in (0, num_layers - 1)]


def check_fp8(num_layers: int) -> None:
    """Refuse ``--precision fp8`` in one line where no layer would compute in fp8 (fewer than 3 layers: the
    first and last stay bf16), instead of training in bf16 under an fp8 banner."""
    if not fp8_layers(num_layers):
        raise ConfigError(f"--precision fp8: a {num_layers}-layer model has no layer in fp8 (the first and the "
                          f"last layers stay bf16); use 3 layers or more, or --precision bf16")


def fp8_mode_line(device, num_layers: Optional[int] = None) -> str:
    """The one line a run prints about what fp8 does: on how many of its layers, and how the GEMMs execute."""
    where = ""
    if num_layers is not None:
        k = len(fp8_layers(num_layers))
        where = f"fp8 on {k} of {num_layers} layers (the first and the last stay bf16); "
    if native(device):
        return (f"mwb: {where}fp8 GEMMs through torch._scaled_mm (e4m3 forward, e5m2 gradients, per-tensor "
                f"current scaling)")
    dev = "CPU" if torch.device(device).type == "cpu" else "a GPU without fp8 tensor cores"
    return (f"mwb: {where}fp8 is emulated on {dev}: e4m3/e5m2 casts and per-tensor scales as on an fp8 GPU, "
            f"matmuls of the dequantised bf16 values with fp32 accumulation (same numerics, no speed-up)")
