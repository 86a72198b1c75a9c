"""The joint objectives against hand computation (math module, loops), their gradients, and K = 1."""
import math

import pytest
import torch
import torch.nn.functional as F

from mwb.retrieval.e2e.losses import emdr2_retriever_loss, individual_topk_loss, retriever_scores

LOGITS = [[0.5, -1.0], [2.0, 0.3]]                       # [B=2, K=2]
LP = [[[-0.1, -2.0, -0.7], [-1.5, -0.2, -3.0]],          # [B, K, T=3]
      [[-0.4, -0.9, -9.0], [-2.2, -0.05, -1.0]]]
MASK = [[1, 1, 1], [1, 1, 0]]                            # question 2 has two answer tokens


def _softmax(row):
    z = [math.exp(x) for x in row]
    return [x / sum(z) for x in z]


def _hand_emdr2():
    total = 0.0
    for b in range(2):
        p = _softmax(LOGITS[b])
        for t in range(3):
            if MASK[b][t]:
                total -= math.log(sum(p[k] * math.exp(LP[b][k][t]) for k in range(2)))
    return total / 2


def _hand_individual():
    total = 0.0
    for b in range(2):
        p = _softmax(LOGITS[b])
        doc = [sum(LP[b][k][t] for t in range(3) if MASK[b][t]) for k in range(2)]
        total -= math.log(sum(p[k] * math.exp(doc[k]) for k in range(2)))
    return total / 2


def _tensors():
    logits = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    return logits, lp, torch.tensor(MASK)


def test_emdr2_equals_hand_logsumexp():
    logits, lp, mask = _tensors()
    assert emdr2_retriever_loss(logits, lp, mask).item() == pytest.approx(_hand_emdr2(), abs=1e-6)
    per_q = emdr2_retriever_loss(logits, lp, mask, reduction="none")
    assert per_q.sum().item() == pytest.approx(2 * _hand_emdr2(), abs=1e-6)


def test_emdr2_gives_no_gradient_to_the_reader():
    logits, lp, mask = _tensors()
    emdr2_retriever_loss(logits, lp, mask).backward()
    assert lp.grad is None or torch.count_nonzero(lp.grad) == 0
    assert torch.count_nonzero(logits.grad) > 0
    # the masked token (question 2, t = 3) changes nothing
    logits2, lp2, _ = _tensors()
    with torch.no_grad():
        lp2[1, :, 2] = -1e9
    assert emdr2_retriever_loss(logits2, lp2, mask).item() == pytest.approx(_hand_emdr2(), abs=1e-6)


def test_k1_reduces_to_cross_entropy():
    torch.manual_seed(0)
    vocab, b, t = 7, 3, 4
    reader_logits = torch.randn(b, 1, t, vocab, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, vocab, (b, t))
    mask = torch.ones(b, t)
    mask[0, 3] = 0
    lp = F.log_softmax(reader_logits, -1).gather(-1, target[:, None, :, None]).squeeze(-1)  # [b, 1, t]
    ce = F.cross_entropy(reader_logits[:, 0].reshape(-1, vocab), target.reshape(-1), reduction="none")
    ce_per_q = (ce.view(b, t) * mask).sum(-1)
    logits = torch.randn(b, 1, dtype=torch.float64, requires_grad=True)
    for loss in (emdr2_retriever_loss, individual_topk_loss):
        assert torch.allclose(loss(logits, lp, mask, reduction="none"), ce_per_q, atol=1e-9)
    # EMDR2 total = reader CE + retriever term: with one document the retriever gets no gradient
    emdr2_retriever_loss(logits, lp, mask).backward()
    assert torch.count_nonzero(logits.grad) == 0


def test_individual_equals_hand_marginal_and_trains_both():
    logits, lp, mask = _tensors()
    loss = individual_topk_loss(logits, lp, mask)
    assert loss.item() == pytest.approx(_hand_individual(), abs=1e-6)
    loss.backward()
    assert torch.count_nonzero(logits.grad) > 0 and torch.count_nonzero(lp.grad) > 0
    assert torch.count_nonzero(lp.grad[1, :, 2]) == 0  # masked token: no gradient
    # the gradient into the reader is the posterior p(z_k | q, a) (per unmasked token), by hand
    p = _softmax(LOGITS[0])
    doc = [sum(LP[0][k]) for k in range(2)]
    post = [p[k] * math.exp(doc[k]) for k in range(2)]
    post = [x / sum(post) for x in post]
    assert lp.grad[0, :, 0].tolist() == pytest.approx([-x / 2 for x in post], abs=1e-9)


def test_retriever_score_is_scaled_inner_product():
    q = torch.tensor([[1.0, 2.0, 0.0, 2.0]])
    d = torch.tensor([[[1.0, 1.0, 1.0, 1.0], [0.0, -1.0, 3.0, 0.5]]])
    assert retriever_scores(q, d, 2.0)[0].tolist() == pytest.approx([5.0 / 2, -1.0 / 2])  # EMDR2: √h = 2
    assert retriever_scores(q, d, 0.05)[0].tolist() == pytest.approx([5.0 / 0.05, -1.0 / 0.05])
    with pytest.raises(ValueError, match="divisor"):
        retriever_scores(q, d, 0.0)


def test_shape_errors_name_the_shapes():
    with pytest.raises(ValueError, match="reader_lp"):
        emdr2_retriever_loss(torch.zeros(2, 3), torch.zeros(2, 2, 1), torch.ones(2, 1))
