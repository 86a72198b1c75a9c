"""The fp32 element-wise functions against the textbook formulas: rotary embeddings (rotate-half, shared
``[s, d]`` and per-row ``[b, s, d]`` tables, non-contiguous input) and RMSNorm (``nn.RMSNorm``), values and
gradients; 16-bit inputs keep torch's paths."""
import pytest
import torch
from torch import nn

from mwb.core.models.fused import RMSNorm

from mwb.core.models.transformer import apply_rope, rope_tables


def reference(x, cos, sin):
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    h = x.size(-1) // 2
    return (x.double() * cos.double() + torch.cat([-x[..., h:], x[..., :h]], -1).double() * sin.double())


@pytest.mark.parametrize("per_row", [False, True])
def test_fp32_rotary_matches_rotate_half_values_and_gradients(per_row):
    g = torch.Generator().manual_seed(0)
    b, heads, s, d = 2, 3, 7, 8
    positions = torch.stack([torch.arange(s), torch.arange(s) + 5]) if per_row else torch.arange(s)
    cos, sin = rope_tables(positions, d, 10000.0)
    if not per_row:  # arbitrary tables too: nothing may assume the two halves are equal
        cos, sin = torch.randn(s, d, generator=g), torch.randn(s, d, generator=g)
    x = torch.randn(b, s, heads, d, generator=g).transpose(1, 2).requires_grad_(True)  # [b, heads, s, d] view
    xr = x.detach().double().requires_grad_(True)
    y, want = apply_rope(x, cos, sin), reference(xr, cos, sin)
    torch.testing.assert_close(y.double(), want, rtol=1e-6, atol=1e-6)
    grad = torch.randn(y.shape, generator=g)
    y.backward(grad)
    want.backward(grad.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-6, atol=1e-6)


def test_bf16_rotates_in_fp32_and_casts_back():
    cos, sin = rope_tables(torch.arange(5), 8, 10000.0)
    x = torch.randn(1, 2, 5, 8).bfloat16()
    y = apply_rope(x, cos, sin)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), reference(x.float(), cos, sin).bfloat16().double())


def test_fp32_rmsnorm_matches_nn_rmsnorm_values_and_gradients():
    g = torch.Generator().manual_seed(1)
    ours, ref = RMSNorm(16, eps=1e-5), nn.RMSNorm(16, eps=1e-5).double()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5, generator=g)
        ref.weight.copy_(ours.weight)
    assert list(ours.state_dict()) == ["weight"] and isinstance(ours, nn.RMSNorm)
    x = (3 * torch.randn(2, 16, 5, generator=g)).transpose(1, 2).requires_grad_(True)  # [2, 5, 16] view
    xr = x.detach().double().requires_grad_(True)
    y, want = ours(x), ref(xr)
    torch.testing.assert_close(y.double(), want, rtol=1e-6, atol=1e-6)
    grad = torch.randn(y.shape, generator=g)
    y.backward(grad)
    want.backward(grad.double())
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours.weight.grad.double(), ref.weight.grad, rtol=1e-5, atol=1e-6)


def test_bf16_rmsnorm_takes_torchs_path():
    norm = RMSNorm(8, eps=1e-6).bfloat16()
    x = torch.randn(3, 8).bfloat16()
    torch.testing.assert_close(norm(x), nn.functional.rms_norm(x, (8,), norm.weight, 1e-6))
