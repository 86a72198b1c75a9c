"""The 1-byte-mask dropout: the same mask, outputs and gradients as ``F.dropout`` on CPU, half the saved bytes
in bf16 (torch's CPU dropout keeps a 2-byte mask)."""
import torch
import torch.nn.functional as F

from mwb.core.models.dropout import Dropout, dropout
from mwb.core.plan.measure import count_saved


def _run(fn, dtype):
    x = torch.randn(3, 8, 16, generator=torch.Generator().manual_seed(0)).to(dtype).requires_grad_()
    torch.manual_seed(7)
    y, saved = count_saved(fn, x)
    (y.float() * torch.arange(y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), x.grad, saved.bytes, x.numel()


def test_bool_mask_dropout_equals_native_and_saves_one_byte_per_element():
    for dtype in (torch.bfloat16, torch.float32):
        y0, g0, native_bytes, n = _run(lambda t: F.dropout(t, 0.3, True), dtype)
        y1, g1, ours, _ = _run(lambda t: dropout(t, 0.3, True), dtype)
        assert torch.equal(y0, y1) and torch.equal(g0, g1)
        assert native_bytes == n * torch.tensor([], dtype=dtype).element_size()  # what torch keeps on CPU
        assert ours == n  # one torch.bool per element


def test_dropout_module_is_identity_in_eval_and_at_p0():
    x = torch.randn(4, 4)
    m = Dropout(0.5).eval()
    assert m(x) is x and Dropout(0.0)(x) is x
