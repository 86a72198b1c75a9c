"""Rotary embeddings: the fp32 autograd function equals the textbook rotate-half formula (values and
gradients), for shared ``[s, d]`` tables and per-row ``[b, s, d]`` tables, on non-contiguous inputs; bf16
keeps the fp32-then-cast path."""
import pytest
import torch

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
