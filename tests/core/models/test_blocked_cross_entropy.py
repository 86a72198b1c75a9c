"""Blocked cross-entropy equals ``F.cross_entropy`` on the real vocabulary (loss and gradient ≤ 1e-6),
with many blocks, padded vocabulary columns, ignored labels and 16-bit logits; the vocab-parallel version is
checked against the same reference in tests/core/parallel/test_collectives.py."""
import pytest
import torch
import torch.nn.functional as F

from mwb.core.models import loss as loss_mod
from mwb.core.models.transformer import CrossEntropy


@pytest.mark.parametrize("dtype,vocab", [(torch.float32, 50), (torch.bfloat16, 50), (torch.float32, 64)])
def test_matches_f_cross_entropy_over_many_blocks(monkeypatch, dtype, vocab):
    """vocab 50 of 64 columns: the blocks (7 of 3 rows); fp32 with all 64 columns real: the in-place path."""
    monkeypatch.setattr(loss_mod, "BLOCK_ELEMENTS", 3 * 64)  # 3 rows per block: 7 blocks for 20 tokens
    padded = 64
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(4, 5, padded, generator=g) * 3).to(dtype)
    labels = torch.randint(0, vocab, (4, 5), generator=g)
    labels[1, 2] = -100
    mine = logits.clone().requires_grad_(True)
    total, count = CrossEntropy(vocab)(mine, labels)
    (total * 0.7).backward()
    ref_in = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(ref_in[..., :vocab].float().reshape(-1, vocab), labels.reshape(-1), ignore_index=-100,
                          reduction="sum")
    (ref * 0.7).backward()
    assert count.item() == 19
    assert abs(total.item() - ref.item()) <= 1e-6 * abs(ref.item())
    assert mine.grad.dtype == dtype and mine.grad.shape == logits.shape
    assert torch.all(mine.grad[..., vocab:] == 0)  # padded columns get no gradient
    tol = 1e-6 if dtype == torch.float32 else 4e-3  # bf16: the gradient is rounded to bf16 once
    assert torch.allclose(mine.grad.float(), ref_in.grad.float(), atol=tol, rtol=tol)


def test_no_fp32_copy_of_the_logits_is_kept_for_backward():
    """What autograd saves: the logits themselves plus per-token vectors, not a [tokens, vocab] fp32 copy."""
    logits = torch.randn(8, 1000, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 1000, (8,))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        loss_mod.blocked_cross_entropy(logits, labels, 1000)
    big = [t for t in saved if t.numel() >= 8 * 1000]
    assert len(big) == 1 and big[0].dtype == torch.bfloat16


def test_in_place_path_matches_torch_with_per_token_weights_and_refuses_a_second_backward():
    """fp32 unpadded: the saved log-softmax becomes the gradient; per-token upstream weights (a loss mask,
    token-count scaling) as F.cross_entropy gives them; backpropagating the same graph twice raises."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 40, generator=g) * 4
    labels = torch.randint(0, 40, (6,), generator=g)
    weights = torch.tensor([0.5, 0.0, 2.0, 1.0, 0.25, 3.0])
    mine = logits.clone().requires_grad_(True)
    losses = loss_mod.blocked_cross_entropy(mine, labels, 40)
    (losses * weights).sum().backward(retain_graph=True)
    ref_in = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(ref_in, labels, reduction="none")
    (ref * weights).sum().backward()
    assert torch.allclose(losses, ref, atol=1e-6, rtol=1e-6)
    assert torch.allclose(mine.grad, ref_in.grad, atol=1e-6, rtol=1e-6)
    assert torch.all(mine.grad[1] == 0)  # weight 0: no gradient at all
    with pytest.raises(RuntimeError, match="backpropagated twice"):
        (losses * weights).sum().backward()
