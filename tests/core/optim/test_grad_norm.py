"""The global gradient norm: fp32 rows summed in float64 equal the float64 norm within a few fp32
roundings, whatever the length (one fp32 norm over 135M elements is 1.5% off), also across the ragged tail, and a norm too large for fp32 rows is recomputed in float64 rather than reported as inf (which would
skip the step as an fp16 overflow)."""
import math

import pytest
import torch

from mwb.core.optim.optimizer import NORM_ROW, sum_of_squares
from tests.helpers.workers import make_trainer

TREE = {"model": {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "dropout": 0.0,
                  "max_position_embeddings": 16},
        "train": {"steps": 1, "micro_batch_size": 2, "global_batch_size": 2, "seq_length": 16, "seed": 3}}


@pytest.mark.parametrize("n", [0, 7, NORM_ROW, NORM_ROW + 1, 3 * NORM_ROW - 5, 2_000_003])
def test_sum_of_squares_matches_float64(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1e-3
    exact = x.double().square().sum().item()
    got = sum_of_squares(x)
    assert got.dtype == torch.float64
    assert abs(got.item() - exact) <= 2e-7 * max(exact, 1e-30)  # a few fp32 roundings, whatever n


def test_huge_norm_is_finite_and_exact_while_nan_stays_inf():
    trainer = make_trainer(TREE, 1)
    trainer.train_step()
    opt = trainer.optimizer
    grad = opt.groups[0].grad
    grad.fill_(1e20)  # each fp32 row of squares overflows; float64 does not
    expected = grad[0].item() * math.sqrt(sum(hi - lo for lo, hi in opt._norm_ranges[0]))
    norm = opt._grad_norm()
    assert math.isfinite(norm) and abs(norm - expected) <= 1e-9 * expected
    grad[3] = float("nan")
    assert opt._grad_norm() == float("inf")
