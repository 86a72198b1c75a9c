"""The fused output layer + cross-entropy (``mwb.core.models.loss.linear_cross_entropy``) gives the losses and
gradients of ``F.linear`` followed by ``F.cross_entropy`` on the real vocabulary: fp32 with and without
padded columns (≤ 1e-6), bf16 within one bf16 rounding, per-token weights, ignored labels through the model's
mask. Its logits workspace is reused from one backward to the next forward without ever being shared by two
forwards in flight, and a second backward through the same graph raises."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mwb.core.models import loss as loss_mod
from mwb.core.models.loss import LogitsWorkspace, linear_cross_entropy
from mwb.core.models.transformer import CrossEntropy


def _reference(x, w, labels, vocab, weights):
    xr, wr = x.detach().float().requires_grad_(True), w.detach().float().requires_grad_(True)
    logits = F.linear(xr, wr)[..., :vocab]
    losses = F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), reduction="none").view_as(labels)
    (losses * weights).sum().backward()
    return losses.detach(), xr.grad, wr.grad


@pytest.mark.parametrize("dtype,vocab,padded", [(torch.float32, 64, 64), (torch.float32, 50, 64),
                                                (torch.bfloat16, 50, 64)])
def test_matches_linear_then_f_cross_entropy_over_many_blocks(monkeypatch, dtype, vocab, padded):
    monkeypatch.setattr(loss_mod, "EXP_BLOCK_ELEMENTS", 3 * vocab)  # 3 rows per block: 7 blocks for 20 tokens
    monkeypatch.setattr(loss_mod, "LSE_BLOCK_ELEMENTS", 3 * vocab)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 5, 16, generator=g)).to(dtype).requires_grad_(True)
    w = (torch.randn(padded, 16, generator=g) * 0.7).to(dtype).requires_grad_(True)
    labels = torch.randint(0, vocab, (4, 5), generator=g)
    weights = torch.rand(4, 5, generator=g)
    losses = linear_cross_entropy(x, w, labels, vocab)
    (losses * weights).sum().backward()
    ref, gx, gw = _reference(x, w, labels, vocab, weights)
    tol = 1e-6 if dtype == torch.float32 else 2e-2  # bf16: logits and gradients rounded to bf16
    assert losses.dtype == torch.float32 and losses.shape == labels.shape
    assert torch.allclose(losses, ref, atol=tol * 10, rtol=tol)
    assert x.grad.dtype == dtype and w.grad.dtype == dtype
    assert torch.allclose(x.grad.float(), gx, atol=tol, rtol=tol)
    assert torch.allclose(w.grad.float(), gw, atol=tol, rtol=tol)
    assert torch.all(w.grad[vocab:] == 0)  # padded vocabulary rows of the head get no gradient


def test_workspace_is_reused_after_backward_and_never_shared_by_two_forwards_in_flight():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(40, 8, generator=g, requires_grad=True)
    ws = LogitsWorkspace()
    batches = [(torch.randn(6, 8, generator=g, requires_grad=True), torch.randint(0, 40, (6,), generator=g))
               for _ in range(3)]

    def reference(x, labels):
        _, gx, gw = _reference(x, w, labels, 40, torch.ones(6))
        return gx, gw

    x, labels = batches[0]
    linear_cross_entropy(x, w, labels, 40, ws).sum().backward()
    assert ws.spare is not None
    spare_ptr = ws.spare.data_ptr()
    # two forwards before either backward: the first takes the spare, the second allocates its own
    w.grad = None
    (xa, la), (xb, lb) = batches[1], batches[2]
    loss_a = linear_cross_entropy(xa, w, la, 40, ws).sum()
    loss_b = linear_cross_entropy(xb, w, lb, 40, ws).sum()
    loss_b.backward()
    grad_b = w.grad.clone()
    loss_a.backward()
    (ga_x, ga_w), (gb_x, gb_w) = reference(xa, la), reference(xb, lb)
    assert torch.allclose(xa.grad, ga_x, atol=1e-6) and torch.allclose(xb.grad, gb_x, atol=1e-6)
    assert torch.allclose(grad_b, gb_w, atol=1e-6) and torch.allclose(w.grad, ga_w + gb_w, atol=1e-6)
    assert ws.spare is not None and ws.spare.data_ptr() == spare_ptr  # a's backward gave the spare back
    ws.clear()
    assert ws.spare is None


def test_a_second_backward_through_the_same_graph_raises():
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(20, 8, requires_grad=True)
    loss = linear_cross_entropy(x, w, torch.tensor([1, 2, 3]), 20).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="cannot be backpropagated twice"):
        loss.backward()


def test_model_loss_fuses_a_plain_head_only_and_both_paths_agree():
    """``CrossEntropy.head_loss`` fuses a plain bias-free ``nn.Linear``; a hooked head takes the unfused path
    (the hook must run), and the two give the same masked loss sum and gradients."""
    torch.manual_seed(2)
    head = nn.Linear(16, 64, bias=False)
    ce = CrossEntropy(50)
    hidden = torch.randn(2, 7, 16)
    labels = torch.randint(0, 50, (2, 7))
    labels[0, 3] = -100
    mask = torch.ones(2, 7)
    mask[1, 0] = 0
    results = []
    for hooked in (False, True):
        calls = []
        handle = head.register_forward_hook(lambda *a: calls.append(1)) if hooked else None
        assert ce.fuses(head) is not hooked
        h = hidden.clone().requires_grad_(True)
        head.weight.grad = None
        total, count = ce.head_loss(h, head, labels, mask)
        total.backward()
        results.append((total.item(), count.item(), h.grad, head.weight.grad.clone()))
        assert len(calls) == int(hooked)
        if handle:
            handle.remove()
    (t0, c0, hx0, hw0), (t1, c1, hx1, hw1) = results
    assert c0 == c1 == 12
    assert abs(t0 - t1) <= 1e-6 * abs(t1)
    assert torch.allclose(hx0, hx1, atol=1e-6) and torch.allclose(hw0, hw1, atol=1e-6)
    with torch.no_grad():  # evaluation: no backward will come, so the plain path (nothing taken or kept)
        ce.workspace.clear()
        ce.head_loss(hidden, head, labels, mask)
        assert ce.workspace.spare is None
