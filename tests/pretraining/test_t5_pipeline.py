"""T5 under pipeline parallelism equals one process: per-step losses (≤ 1e-5 relative over 5 steps) and the
gathered step-1 gradients, for both position variants, uneven and interleaved splits, and with TP/SP, DP
and the distributed optimizer. The split layouts put a relative-bias table on two stages; those copies must
get the one-process gradient and stay bitwise equal (the loss alone barely notices a missing reduction
in 5 steps, the gradient of the table does). The even PP2 split is also in ``test_specs`` next to BERT."""
import pytest
import torch

from tests.core.models.workers import many_reports, report, tree
from tests.helpers.compare import assert_grads_match, assert_losses_match, rel
from tests.helpers.distributed import run_ranks

TWO = {
    # stage 0: both encoder layers (+ final norm) and decoder layer 0; stage 1: decoder layer 1
    "pp2_uneven_relative": tree("t5", {"pp": 2, "pipeline_layers": [3, 1]}),
    "pp2_learned": tree("t5", {"pp": 2}, position_embedding="learned"),
    # stages 0..3 = enc0, enc1, dec0, dec1 on ranks 0, 1, 0, 1: each table on both ranks
    "pp2_vpp2_relative": tree("t5", {"pp": 2, "vpp": 2}),
    # 3 encoder layers + 1 decoder layer: rank 0 holds stages 0 and 2, two copies of the encoder table
    "pp2_vpp2_3enc_1dec_relative": tree("t5", {"pp": 2, "vpp": 2}, num_layers=3, num_decoder_layers=1),
}
FOUR = {
    "pp2_tp2_sp_relative": tree("t5", {"pp": 2, "tp": 2, "sp": True}),
    # stage 0: encoder layer 0; stage 1: encoder layer 1 and both decoder layers
    "pp2_dp2_distopt_learned": tree("t5", {"pp": 2, "distributed_optimizer": True, "pipeline_layers": [1, 3]},
                                    position_embedding="learned"),
}
# layouts where a bias table has several copies
COPIES = {"pp2_uneven_relative", "pp2_vpp2_relative", "pp2_vpp2_3enc_1dec_relative"}


@pytest.fixture(scope="module")
def spawned():
    out = {}
    for runs, world in ((TWO, 2), (FOUR, 4)):
        results = run_ranks(many_reports, world, list(runs.values()), timeout_s=300)
        out.update({name: [r[i] for r in results] for i, name in enumerate(runs)})
    return out


@pytest.fixture(scope="module")
def references():
    """One-process runs, on one thread like each spawned rank (two threads on two busy cores are far
    slower for these tiny matrices)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {key: report(dict(t, parallel={}), 1) for key, t in
                {str(t["model"]): t for t in [*TWO.values(), *FOUR.values()]}.items()}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", [*TWO, *FOUR])
def test_t5_pipeline_matches_single_process(name, spawned, references):
    ref = references[str({**TWO, **FOUR}[name]["model"])]
    ranks = spawned[name]
    losses = ranks[0]["losses"]
    assert_losses_match(name, losses, ref["losses"])
    assert all(r["losses"] == losses for r in ranks), f"{name}: ranks report different losses"
    assert ref["losses"][-1] < ref["losses"][0]
    assert_grads_match(name, ranks, ref["grads"])
    # step 1's norm is of the gradients just compared: each parameter counted once, whatever holds copies
    assert rel(ranks[0]["norms"][0], ref["norms"][0]) < 1e-6, f"{name}: gradient norm"
    assert all(r["copies_equal"] for r in ranks), f"{name}: stage copies of a bias table differ"
    if name in COPIES:
        assert sum(r["copies"] for r in ranks) > 2  # more copies than tables: the sharing is exercised
