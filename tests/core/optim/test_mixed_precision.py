"""bf16 / fp16 training agrees with fp32 within the rounding of the 16-bit format; fp16 skips inf steps.

Tolerances: the loss is accumulated in fp32 from activations rounded to the 16-bit format once per op, so
over a short run its relative error stays within a few unit roundoffs of that format: u = 2⁻⁹ ≈ 2.0e-3
for bf16 (8 stored mantissa bits) and u = 2⁻¹¹ ≈ 4.9e-4 for fp16. We allow 2.5u (bf16: 5e-3) and 2u
(fp16: 1e-3); measured here: 4e-5 and 1e-5.
"""
import copy

import pytest
import torch

from mwb.core.optim.scaler import LossScaler
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import make_trainer, train_and_report

BASE = {"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "dropout": 0.0,
                  "max_position_embeddings": 64},
        "train": {"steps": 5, "micro_batch_size": 2, "global_batch_size": 8, "seq_length": 32, "seed": 3},
        "optim": {"lr": 1e-3, "warmup_steps": 1}}
# fp16 matmuls have no fast path on CPU (~1000x slower): a smaller model for fp16.
TINY = {"model": {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "dropout": 0.0,
                  "max_position_embeddings": 16},
        "train": {"steps": 4, "micro_batch_size": 2, "global_batch_size": 4, "seq_length": 16, "seed": 5},
        "optim": {"lr": 1e-3}}
TOL = {"bf16": 5e-3, "fp16": 1e-3}


def _with(tree, **train):
    t = copy.deepcopy(tree)
    t["train"].update(train)
    return t


def _max_rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.mark.parametrize("precision,tree", [("bf16", BASE), ("fp16", TINY)])
def test_16bit_matches_fp32(precision, tree):
    ref = train_and_report(0, 1, tree, grad_step=False)["losses"]
    got = train_and_report(0, 1, _with(tree, precision=precision), grad_step=False)
    assert not any(got["skipped"])
    assert _max_rel(got["losses"], ref) < TOL[precision]


@pytest.mark.multiprocess
def test_bf16_tp2_distributed_optimizer_matches_fp32_single_process():
    ref = train_and_report(0, 1, BASE, grad_step=False)["losses"]
    tree = _with(BASE, precision="bf16")
    tree["parallel"] = {"tp": 2, "distributed_optimizer": True}
    got = run_ranks(train_and_report, 4, tree, False)[0]["losses"]
    assert _max_rel(got, ref) < TOL["bf16"]


def test_fp16_step_with_inf_gradient_is_skipped_and_weights_stay_finite():
    trainer = make_trainer(_with(TINY, precision="fp16", hysteresis=1), 1)
    opt = trainer.optimizer
    original = opt.reduce_gradients
    calls = {"n": 0}

    def poisoned():
        original()
        calls["n"] += 1
        if calls["n"] == 2:
            opt.pieces[0].grad.view(-1)[0] = float("inf")
    opt.reduce_gradients = poisoned
    trainer.train_step()
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    scale_before = trainer.scaler.scale
    res = trainer.train_step()
    assert res.skipped and opt.found_inf_steps == 1 and trainer.scaler.skipped == 1
    assert trainer.scaler.scale == scale_before / 2  # hysteresis 1: halve at once
    for n, p in trainer.model.named_parameters():
        assert torch.equal(p, before[n]), f"{n} changed on a skipped step"
    res = trainer.train_step()
    assert not res.skipped
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_loss_scaler_hysteresis_and_growth():
    s = LossScaler(initial=1024, min_scale=1, growth_interval=3, hysteresis=2)
    s.update(True)
    assert s.scale == 1024  # first overflow absorbed by hysteresis
    s.update(True)
    assert s.scale == 512
    for _ in range(3):
        s.update(False)
    assert s.scale == 1024 and s.skipped == 2
    s2 = LossScaler(initial=2, min_scale=1, growth_interval=10, hysteresis=1)
    for _ in range(5):
        s2.update(True)
    assert s2.scale == 1
    assert LossScaler(dynamic=False).scale == 1.0
