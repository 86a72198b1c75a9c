"""`mwb plan` with --fsdp: every model state divided by dp, the gathered root group and two blocks counted,
and the communication of FSDP2 as mwb runs it (per micro-batch: all-gather forward, again backward,
reduce-scatter of the gradients), checked against the same numbers worked out here."""
from __future__ import annotations

import dataclasses

import pytest

from mwb.core.config import RunConfig
from mwb.core.plan import HARDWARE, Constraints, Layout, MemoryModel, ModelShape, Workload
from mwb.core.plan.cost import CostModel
from mwb.core.plan.formulas import STATE_BYTES
from mwb.core.plan.search import search, structural_problem
from mwb.core.presets import apply_preset

A100 = HARDWARE["a100-80gb"]
GBS = 64


def _shape() -> ModelShape:
    return ModelShape.from_config(apply_preset(RunConfig(), "gpt-1.3b").model, 2048)


@pytest.mark.parametrize("tp,dp", [(1, 8), (2, 4)])
def test_states_are_divided_by_dp_and_the_gathered_blocks_counted(tp, dp):
    shape = _shape()
    mem = MemoryModel(shape, GBS, "bf16")
    plain = Layout(tp=tp, dp=dp, micro_batch_size=1)
    fsdp = dataclasses.replace(plain, fsdp=True)
    a, b = mem.peak(plain), mem.peak(fsdp)
    assert (b.weights, b.grads, b.optimizer) == pytest.approx((a.weights / dp, a.grads / dp, a.optimizer / dp))
    w, g, _ = STATE_BYTES["bf16"]
    block = shape.layers()[0]
    per_block = block.sharded / tp + block.replicated
    root = a.params - shape.num_layers * per_block  # embedding, final norm, (tied) head
    assert b.detail["fsdp_gathered"] == pytest.approx((root + 2 * per_block) * (w + g))
    assert b.activations - b.detail["fsdp_gathered"] == pytest.approx(a.activations)


def test_communication_is_two_all_gathers_and_a_reduce_scatter_per_micro_batch():
    shape = _shape()
    mem = MemoryModel(shape, GBS, "bf16")
    cost = CostModel(mem, A100)
    lay = Layout(tp=1, dp=8, micro_batch_size=2, fsdp=True)
    m = GBS // (8 * 2)
    params = mem.params(lay, 0)[0]
    w, g, _ = STATE_BYTES["bf16"]
    assert cost.estimate(lay).comm.dp_bytes == pytest.approx(m * 7 / 8 * params * (2 * w + g))
    plain = cost.estimate(dataclasses.replace(lay, fsdp=False)).comm.dp_bytes
    assert plain == pytest.approx(2 * 7 / 8 * params * g)  # one bucketed all-reduce per step


def test_fsdp_layouts_need_pp_1_and_the_search_keeps_to_them():
    shape = _shape()
    wl = Workload(gpus=8, global_batch_size=GBS)
    assert "pp 1" in structural_problem(shape, Layout(tp=1, pp=2, dp=4, fsdp=True), wl)
    res = search(apply_preset(RunConfig(), "gpt-1.3b").model, wl, A100, Constraints(fsdp=True), 2048)
    assert res.fits and all(e.layout.fsdp and e.layout.pp == 1 and not e.layout.distributed_optimizer
                               for e in res.fits)
