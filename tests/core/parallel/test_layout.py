"""Rank grid and layout validation: every bad layout fails at start-up with a message naming the numbers."""
import pytest

from mwb.core.config import RunConfig, update
from mwb.core.parallel.dims import LayoutError, ParallelDims
from mwb.core.parallel.state import rank_groups
from mwb.core.training.trainer import parallel_dims


def test_megatron_order_groups():
    d = ParallelDims(world_size=8, tp=2, pp=2)
    assert d.dp == 2
    assert rank_groups(d, ("tp",)) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert rank_groups(d, ("dp",)) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert rank_groups(d, ("pp",)) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert rank_groups(d, ("tp", "pp")) == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_expert_groups_split_data_parallel():
    d = ParallelDims(world_size=8, tp=1, ep=2)
    assert d.dp == 8 and d.edp == 4
    assert rank_groups(d, ("ep",)) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert rank_groups(d, ("edp", "cp")) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_custom_order():
    d = ParallelDims(world_size=4, tp=2, pp=2, order="tp-pp-dp-cp")
    assert rank_groups(d, ("pp",)) == [[0, 2], [1, 3]]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(world_size=6, tp=4), "not divisible by tp·pp·cp"),
    (dict(world_size=2, sp=True), "needs tensor parallelism"),
    (dict(world_size=4, tp=1, ep=3), "expert parallel size 3"),
    (dict(world_size=2, vpp=2), "need pipeline parallelism"),
    (dict(world_size=2, order="tp-dp"), "permutation"),
    (dict(world_size=0), "positive integer"),
])
def test_bad_dims(kwargs, needle):
    with pytest.raises(LayoutError, match=needle):
        ParallelDims(**kwargs)


@pytest.mark.parametrize("model,parallel,world,needle", [
    ({"num_attention_heads": 3}, {"tp": 2}, 2, "attention heads 3 is not divisible by tp 2"),
    ({"num_attention_heads": 4, "num_query_groups": 1}, {"tp": 2}, 2, "query groups 1"),
    ({"num_layers": 3}, {"pp": 2}, 2, "num_layers 3 is not divisible"),
    ({"num_experts": 3}, {"ep": 2}, 2, "number of experts 3 is not divisible by ep 2"),
    ({}, {"ep": 2}, 2, "needs a mixture-of-experts"),
    ({"ffn_hidden_size": 30}, {"tp": 4}, 4, "ffn hidden size 30"),
])
def test_bad_model_for_layout(model, parallel, world, needle):
    cfg = update(RunConfig(), {"model": model, "parallel": parallel})
    with pytest.raises(LayoutError, match=needle):
        parallel_dims(cfg, world)


def test_batch_must_divide():
    cfg = update(RunConfig(), {"train": {"global_batch_size": 6, "micro_batch_size": 4}})
    with pytest.raises(LayoutError, match="global batch size 6"):
        parallel_dims(cfg, 1)
