"""Tensor, sequence and data parallelism compute the same losses and gradients as one process."""
import pytest

from tests.helpers.distributed import run_ranks
from tests.helpers.workers import train_and_report
from tests.helpers.compare import assert_grads_match, assert_losses_match

BASE = {
    "model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "dropout": 0.0,
              "max_position_embeddings": 64},
    "train": {"steps": 5, "micro_batch_size": 2, "global_batch_size": 8, "seq_length": 32, "seed": 3},
    "optim": {"lr": 1e-3, "warmup_steps": 1},
}


def with_(**sections):
    tree = {k: dict(v) for k, v in BASE.items()}
    for sec, vals in sections.items():
        tree.setdefault(sec, {}).update(vals)
    return tree


@pytest.fixture(scope="module")
def reference():
    return train_and_report(0, 1, with_())




LAYOUTS = {
    "tp2": (2, {"parallel": {"tp": 2}}),
    "tp4": (4, {"parallel": {"tp": 4}}),
    "tp2_sp": (2, {"parallel": {"tp": 2, "sp": True}}),
    "dp2": (2, {"parallel": {}}),
    "dp2_distopt": (2, {"parallel": {"distributed_optimizer": True}}),
    "tp2_dp2_distopt": (4, {"parallel": {"tp": 2, "distributed_optimizer": True}}),
    "cp2": (2, {"parallel": {"cp": 2}}),
    "cp2_tp2_sp_distopt": (4, {"parallel": {"cp": 2, "tp": 2, "sp": True, "distributed_optimizer": True}}),
}


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_matches_single_process(reference, name):
    world, extra = LAYOUTS[name]
    results = run_ranks(train_and_report, world, with_(**extra))
    assert_losses_match(name, results[0]["losses"], reference["losses"])
    assert_grads_match(name, results, reference["grads"])
