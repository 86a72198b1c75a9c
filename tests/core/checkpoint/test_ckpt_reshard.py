"""A checkpoint saved at TP2×PP2 (4 ranks) loads into other layouts with the same model and optimizer.

"Same" is measured by full logits on a fixed batch, the forward loss of a fixed global batch, and the losses
of the next two training steps (which also depend on the Adam moments, the fp32 masters, the LR schedule
position and the data position): equal to fp32 tolerance in another layout, bit-identical in the same one.
"""
import pytest
import torch

from mwb.core.compose import load_full_model
from tests.core.checkpoint.ckpt_workers import load_then_continue, tree
from tests.helpers.distributed import run_ranks
from tests.helpers.compare import rel

_tp1 = {}




def assert_same_run(got: dict, ref: dict, what: str, tol: float = 1e-5):
    assert got["step"] == 2, what
    assert rel(got["fixed_loss"], ref["fixed_loss"]) < tol, f"{what}: fixed-batch loss"
    for i, (a, b) in enumerate(zip(got["next"], ref["next"])):
        assert rel(a, b) < tol, f"{what}: loss of step {3 + i}: {a} vs {b} (uninterrupted run)"


@pytest.mark.multiprocess
def test_same_layout_resume_is_bit_identical(saved):
    assert saved["step"] == 2
    assert saved["second"]["next"] == saved["first"]["next"]
    assert saved["second"]["fixed_loss"] == saved["first"]["fixed_loss"]


def tp1(saved) -> dict:
    if "r" not in _tp1:
        _tp1["r"] = load_then_continue(0, 1, tree(), saved["path"])
    return _tp1["r"]


@pytest.mark.multiprocess
def test_load_at_tp1_and_full_model(saved):
    got = tp1(saved)
    assert_same_run(got, saved["first"], "TP1")
    cfg, model, tok = load_full_model(saved["path"])  # sharded checkpoint → one process
    assert tok is None and cfg.model.vocab_size == 200
    from tests.core.checkpoint.ckpt_workers import FIXED, get_microbatches
    tokens = get_microbatches(FIXED, 0, 2, 2, 1, 0)[0]["tokens"][:, :-1]
    with torch.no_grad():
        logits = model(tokens=tokens)[..., :200]
    torch.testing.assert_close(logits, got["logits"], rtol=0, atol=1e-5)


@pytest.mark.multiprocess
def test_load_at_tp4(saved):
    got = run_ranks(load_then_continue, 4, tree(tp=4), saved["path"])[0]
    assert_same_run(got, saved["first"], "TP4")
    torch.testing.assert_close(got["logits"], tp1(saved)["logits"], rtol=0, atol=1e-5)


@pytest.mark.multiprocess
def test_load_at_dp2_distributed_optimizer(saved):
    got = run_ranks(load_then_continue, 2, tree(distributed_optimizer=True), saved["path"])[0]
    assert_same_run(got, saved["first"], "DP2 + distributed optimizer")
    torch.testing.assert_close(got["logits"], tp1(saved)["logits"], rtol=0, atol=1e-5)
