"""Schedule orders (on paper), the interleaving constraint, micro-batches in flight measured on real ranks,
and what happens when a pipeline rank dies or hangs mid-step."""
import copy
import pickle
import queue
import time
from types import SimpleNamespace

import pytest
import torch.multiprocessing as mp

from mwb.core.config import RunConfig, update
from mwb.core.parallel.dims import LayoutError
from mwb.core.pipeline.measure import Setup, measure_rank
from mwb.core.pipeline.orders import gpipe, interleaved, one_f_one_b, simulate
from mwb.core.pipeline.schedules import run_pipeline
from mwb.core.training.trainer import parallel_dims
from tests.core.pipeline.pipeline_workers import die_mid_step
from tests.helpers.distributed import _free_port, _worker, run_ranks


# ------------------------------------------------------------------------------------------ on paper

def test_1f1b_warmup_and_every_microbatch_once():
    for pp in (2, 4):
        for r in range(pp):
            slots = one_f_one_b(pp, r, 8)
            acts = [a for s in slots for a in s]
            assert [a.kind for a in acts[:pp - r - 1]] == ["F"] * (pp - r - 1)
            assert sorted((a.kind, a.mb) for a in acts) == sorted([("F", m) for m in range(8)] +
                                                                  [("B", m) for m in range(8)])


@pytest.mark.parametrize("pp,vpp", [(2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (4, 2), (2, 3), (4, 3)])
def test_schedules_are_deadlock_free_and_match_theory(pp, vpp):
    for m in range(pp, 4 * pp + 1, pp if vpp > 1 else 1):
        sim = simulate("1f1b", pp, vpp, m)
        theory = (pp - 1) / (vpp * m)
        assert all(abs(sim.bubble(r) - theory) < 1e-9 for r in range(pp)), (pp, vpp, m)
        expected = min(pp, m) if vpp == 1 else min(2 * (pp - 1) + (vpp - 1) * pp + 1, vpp * m)
        assert sim.peak_in_flight[0] == expected
        assert simulate("gpipe", pp, vpp, m).peak_in_flight[0] == vpp * m
        simulate("forward", pp, vpp, m)


def test_interleaved_needs_microbatches_multiple_of_pp():
    with pytest.raises(LayoutError, match=r"multiple of pp 4, got 6 micro-batches"):
        interleaved(4, 2, 0, 6)
    # The executor says so before any communication, with the numbers to change.
    state = SimpleNamespace(pp_size=2, pp_rank=0, dp_size=2)
    with pytest.raises(LayoutError, match=r"multiple of pp 2, got 3 micro-batches.*micro-batch size 1 × "
                                          r"data-parallel size 2.*multiple of 4"):
        run_pipeline("1f1b", [object(), object()], [{}] * 3, None, state, 1.0, micro_batch_size=1)
    assert len(gpipe(2, 0, 3, vpp=2)) == 12  # GPipe has no such constraint
    # And the layout check the CLI runs before starting any rank catches it too.
    cfg = update(RunConfig(), {"parallel": {"pp": 2, "vpp": 2}, "model": {"num_layers": 4},
                               "train": {"global_batch_size": 6, "micro_batch_size": 1, "seq_length": 16}})
    with pytest.raises(LayoutError, match=r"multiple of pp 2, got 3 micro-batches"):
        parallel_dims(cfg, 4)
    parallel_dims(cfg, 2)  # 6 micro-batches on one data-parallel rank: fine


# --------------------------------------------------------------------------------- on real ranks

@pytest.mark.multiprocess
def test_microbatches_in_flight_measured_by_saved_tensor_hooks():
    setups = [Setup(2, 1, 6, "1f1b", num_layers=4, layer_fwd_s=0.0),
              Setup(2, 1, 6, "gpipe", num_layers=4, layer_fwd_s=0.0),
              Setup(2, 2, 4, "1f1b", num_layers=4, layer_fwd_s=0.0)]
    per_rank = run_ranks(measure_rank, 2, setups)
    one_f, gp, inter = ([r[i]["peak_in_flight"] for r in per_rank] for i in range(3))
    assert one_f == [2, 1]  # 1F1B: at most pp micro-batches alive on stage 0
    assert gp == [6, 6]  # GPipe: all of them
    assert inter == simulate("1f1b", 2, 2, 4).peak_in_flight == [5, 3]


# -------------------------------------------------------------------------------------- failures

BASE = {"model": {"num_layers": 4, "hidden_size": 32, "num_attention_heads": 4, "dropout": 0.0,
                  "max_position_embeddings": 16},
        "train": {"steps": 1, "micro_batch_size": 1, "global_batch_size": 8, "seq_length": 8, "seed": 3},
        "parallel": {"timeout_s": 10}}


def survivors(world: int, victim: int, hang: bool, pp: int, deadline_s: float = 90.0) -> dict:
    """Spawn ``world`` ranks running :func:`die_mid_step`; collect every other rank's report."""
    tree = copy.deepcopy(BASE)
    tree["parallel"]["pp"] = pp
    ctx = mp.get_context("spawn")
    results, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, die_mid_step, (tree, victim, hang), results, 10),
                         daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    out, end = {}, time.monotonic() + deadline_s
    try:
        while len(out) < world - 1 and time.monotonic() < end:
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                continue
            out[rank] = pickle.loads(value) if ok else {"error": value, "seconds": None}
    finally:
        for p in procs:
            p.join(timeout=0.5 if p.is_alive() else 5)
            if p.is_alive():
                p.kill()
    return out


@pytest.mark.multiprocess
def test_killed_rank_is_named_by_every_other_rank():
    out = survivors(4, victim=2, hang=False, pp=4)
    assert sorted(out) == [0, 1, 3]
    for rank, r in out.items():
        assert r["error"] and "rank 2 died or stopped responding" in r["error"], (rank, r)


@pytest.mark.multiprocess
def test_hung_rank_fails_the_others_after_the_timeout():
    out = survivors(2, victim=1, hang=True, pp=2)
    assert sorted(out) == [0]
    r = out[0]
    assert r["error"] and "rank 1 died or stopped responding" in r["error"], r
    # parallel.timeout_s = 10: the survivor waited for the timeout before giving up (a lower bound, which load
    # cannot break; no upper bound: how fast is not a correctness property, and fails on a loaded machine)
    assert r["seconds"] >= 9.0, r["seconds"]
