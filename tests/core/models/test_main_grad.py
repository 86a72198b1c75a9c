"""Gradient-accumulation fusion (``mwb.core.models.main_grad``): a linear layer, an embedding and the fused
output layer write their weight gradients into ``main_grad`` (overwriting a stale slice, adding to a fresh
one) and those equal autograd's gradients, tied weights included; without a ``main_grad`` of the weight's
dtype, or for a module that is hooked or not a plain ``nn.Linear``/``nn.Embedding``, they take autograd's route."""
import torch
from torch import nn

from mwb.core.models.loss import linear_cross_entropy
from mwb.core.models.main_grad import embedding, linear


def _attach(p: torch.Tensor, fill: float = 123.0) -> None:
    p.main_grad = torch.full_like(p, fill)  # garbage: a stale slice must be overwritten, not added to
    p.main_grad_stale = True


def test_linear_writes_the_weight_gradient_into_main_grad_and_adds_the_second_one():
    torch.manual_seed(0)
    lin = nn.Linear(6, 5)
    x = torch.randn(2, 3, 6, requires_grad=True)
    g = torch.randn(2, 3, 5)
    lin(x).backward(g)
    ref_w, ref_b, ref_x = lin.weight.grad.clone(), lin.bias.grad.clone(), x.grad.clone()
    lin.weight.grad = lin.bias.grad = x.grad = None
    _attach(lin.weight)
    out = linear(lin, x)
    assert torch.equal(out, lin(x))
    out.backward(g)
    assert lin.weight.grad is None and not lin.weight.main_grad_stale
    assert torch.allclose(lin.weight.main_grad, ref_w, atol=1e-6)
    assert torch.allclose(lin.bias.grad, ref_b, atol=1e-6) and torch.allclose(x.grad, ref_x, atol=1e-6)
    linear(lin, x).backward(g)  # a second micro-batch accumulates
    assert torch.allclose(lin.weight.main_grad, 2 * ref_w, atol=1e-5)


def test_without_a_matching_main_grad_or_with_a_hook_the_module_runs_as_itself():
    torch.manual_seed(1)
    lin = nn.Linear(4, 3, bias=False)
    x = torch.randn(5, 4)
    linear(lin, x).sum().backward()  # no main_grad: autograd's route
    assert lin.weight.grad is not None
    half = nn.Linear(4, 3, bias=False).to(torch.bfloat16)
    half.weight.main_grad = torch.zeros(3, 4)  # fp32 main_grad of a bf16 weight: not fused
    half.weight.main_grad_stale = True
    linear(half, x.to(torch.bfloat16)).float().sum().backward()
    assert half.weight.grad is not None and half.weight.main_grad_stale
    _attach(lin.weight)
    lin.weight.grad = None
    calls = []
    lin.register_forward_hook(lambda *a: calls.append(1))
    linear(lin, x).sum().backward()
    assert calls == [1] and lin.weight.grad is not None and lin.weight.main_grad_stale


def test_tied_embedding_and_fused_head_sum_into_main_grad_as_autograd_sums_them():
    torch.manual_seed(2)
    emb = nn.Embedding(30, 8)
    ids = torch.randint(0, 30, (3, 9))
    ids[0, :4] = 7  # repeated rows are summed
    labels = torch.randint(0, 30, (3, 9))

    def step():
        hidden = embedding(emb, ids) * 1.3
        linear_cross_entropy(hidden, emb.weight, labels, 30).sum().backward()

    step()
    ref = emb.weight.grad.clone()
    emb.weight.grad = None
    _attach(emb.weight)
    step()
    assert emb.weight.grad is None
    assert torch.allclose(emb.weight.main_grad, ref, atol=1e-5)


def test_embedding_falls_back_to_autograds_gradient_and_special_embeddings_are_left_alone():
    torch.manual_seed(3)
    emb = nn.Embedding(12, 4)
    ids = torch.tensor([[1, 1, 5], [0, 11, 1]])
    g = torch.randn(2, 3, 4)
    emb(ids).backward(g)
    ref = emb.weight.grad.clone()
    emb.weight.grad = None
    _attach(emb.weight)
    out = embedding(emb, ids)  # fused at forward time ...
    del emb.weight.main_grad  # ... but main_grad is gone by backward: autograd's own dense gradient
    out.backward(g)
    assert torch.equal(emb.weight.grad, ref)
    padded = nn.Embedding(12, 4, padding_idx=1)
    _attach(padded.weight)
    embedding(padded, ids).backward(g)
    assert padded.weight.grad is not None and padded.weight.main_grad_stale  # padding_idx: torch's own path
    assert torch.all(padded.weight.grad[1] == 0)
