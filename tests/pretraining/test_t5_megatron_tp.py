"""T5 with megatron-core's options (``t5_head_bias``, ``t5_final_norm: false``) under TP 2 (+SP) equals one
process: per-step losses and the gathered step-1 gradients, the head bias's included. That bias is split over
the vocabulary like BERT's head bias, so a wrong shard (or a missing gather) shows in its gradient."""
import pytest
import torch

from tests.core.models.workers import many_reports, report, tree
from tests.helpers.compare import assert_grads_match, assert_losses_match
from tests.helpers.distributed import run_ranks

OPTS = {"position_embedding": "learned", "t5_head_bias": True, "t5_final_norm": False}
RUNS = {"tp2": tree("t5", {"tp": 2}, **OPTS), "tp2_sp": tree("t5", {"tp": 2, "sp": True}, **OPTS)}


@pytest.fixture(scope="module")
def spawned():
    results = run_ranks(many_reports, 2, list(RUNS.values()), timeout_s=300)
    return {name: [r[i] for r in results] for i, name in enumerate(RUNS)}


@pytest.fixture(scope="module")
def reference():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return report(dict(RUNS["tp2"], parallel={}), 1)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(RUNS))
def test_t5_megatron_options_under_tp_match_single_process(name, spawned, reference):
    ranks = spawned[name]
    assert "head.bias" in reference["grads"] and reference["grads"]["head.bias"].abs().max() > 0
    assert_losses_match(name, ranks[0]["losses"], reference["losses"])
    assert_grads_match(name, ranks, reference["grads"])
