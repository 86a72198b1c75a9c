"""Pipeline parallelism (1F1B, interleaved), alone and with TP, SP, DP and the distributed optimizer, computes
the same per-step losses and step-1 gradients as one process; the tied embedding copies on the first and
last stage start equal and stay equal."""
import copy

import pytest

from tests.core.pipeline.pipeline_workers import report_with_tied_check
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import train_and_report
from tests.helpers.compare import assert_grads_match, assert_losses_match

BASE = {
    "model": {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "dropout": 0.0,
              "max_position_embeddings": 64},
    "train": {"steps": 5, "micro_batch_size": 1, "global_batch_size": 8, "seq_length": 16, "seed": 3},
    "optim": {"lr": 1e-3, "warmup_steps": 1},
}

LAYOUTS = {
    "pp2": (2, {"pp": 2}),
    "pp4": (4, {"pp": 4}),
    "pp2_vpp2": (2, {"pp": 2, "vpp": 2}),
    "pp2_tp2": (4, {"pp": 2, "tp": 2}),
    "pp2_dp2_distopt": (4, {"pp": 2, "distributed_optimizer": True}),
    # everything at once (8 ranks, ~30 s here): interleaving, TP with SP, DP with the distributed optimizer
    "pp2_vpp2_tp2_sp_dp2_distopt": (8, {"pp": 2, "vpp": 2, "tp": 2, "sp": True, "distributed_optimizer": True}),
    "pp2_recompute_full": (2, {"pp": 2, "recompute": "full", "recompute_num_layers": 2}),
}


def tree(**parallel):
    t = copy.deepcopy(BASE)
    t["parallel"] = parallel
    return t


@pytest.fixture(scope="module")
def reference():
    return train_and_report(0, 1, tree())




@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_pipeline_layout_matches_single_process(reference, name):
    world, parallel = LAYOUTS[name]
    results = run_ranks(report_with_tied_check, world, tree(**parallel))
    losses = results[0]["losses"]
    assert_losses_match(name, losses, reference["losses"])
    assert all(r["losses"] == losses for r in results), f"{name}: ranks report different losses"
    assert_grads_match(name, results, reference["grads"])
    for rank, r in enumerate(results):
        assert r["tied_equal_init"], f"{name} rank {rank}: tied embedding copies differ at initialisation"
        assert r["tied_equal_end"], f"{name} rank {rank}: tied embedding copies differ after training"


# Llama-style GPT (rotary positions, SwiGLU, RMSNorm, grouped-query attention, untied head): a later stage
# receives a sequence slice under SP and must still build rotary tables for the whole sequence.
LLAMA = {"position_embedding": "rope", "activation": "swiglu", "normalization": "rmsnorm", "bias": False,
         "num_query_groups": 2, "tie_embeddings": False}


@pytest.mark.multiprocess
def test_rope_model_pp2_tp2_sp_matches_single_process():
    base = tree()
    base["model"].update(LLAMA)
    ref = train_and_report(0, 1, base)
    par = copy.deepcopy(base)
    par["parallel"] = {"pp": 2, "tp": 2, "sp": True}
    results = run_ranks(report_with_tied_check, 4, par)
    assert_losses_match("rope pp2 tp2 sp", results[0]["losses"], ref["losses"])
    assert_grads_match("rope pp2 tp2 sp", results, ref["grads"])
