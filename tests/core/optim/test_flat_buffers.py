"""The flat gradient buffer's lazy zeroing: the first gradient of a step overwrites the stale slice, later
micro-batches add to it, and a parameter no gradient reached reads zero after ``finish`` — never the value
of an earlier step."""
import torch
from torch import nn

from mwb.core.optim.buffers import FlatBuffers


def test_first_gradient_overwrites_later_ones_add_and_unreached_slices_are_zeroed():
    torch.manual_seed(0)
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    buf = FlatBuffers(list(a.named_parameters(prefix="a")) + list(b.named_parameters(prefix="b")), None)
    x = torch.randn(4, 3)

    (a(x).sum() + 2 * b(x).sum()).backward()  # step 1: both reached
    buf.finish()
    g_a = a.weight.main_grad.clone()
    torch.testing.assert_close(b.weight.main_grad, 2 * g_a)

    buf.zero_grad()  # step 2: two micro-batches through a only
    a(x).sum().backward()
    a(x).sum().backward()
    assert float(b.weight.main_grad.abs().sum()) > 0  # still stale before finish: no full-buffer memset
    buf.finish()
    torch.testing.assert_close(a.weight.main_grad, 2 * g_a)  # copied once, then added once
    assert float(b.weight.main_grad.abs().sum()) == 0.0 and float(b.bias.main_grad.abs().sum()) == 0.0
    assert a.weight.grad is None  # the hook moved the gradient into the buffer

    buf.zero_grad()  # step 3: nothing reached; everything reads zero
    buf.finish()
    assert float(buf.grads.abs().sum()) == 0.0
