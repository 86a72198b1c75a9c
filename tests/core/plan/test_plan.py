"""``mwb.core.plan``: the paper formulas, the general counts they must agree with, the memory and cost
models, the layout search, and the Table 1 reproduction that docs/plan.md shows."""
from __future__ import annotations

import pathlib

import pytest

from mwb.core.config import ModelConfig, RunConfig
from mwb.core.errors import MwbError
from mwb.core.parallel.dims import LayoutError
from mwb.core.plan import (HARDWARE, Constraints, Layout, MemoryModel, ModelShape, Workload,
                           activation_breakdown, activation_bytes_per_layer, bytes_per_parameter,
                           count_parameters, flops_per_iteration, inflight_microbatch_chunks,
                           korthikanti_bytes_per_layer, model_flops_per_iteration, paper_flops_per_iteration,
                           paper_parameter_count, pipeline_bubble, plan, rank_parameters, search)
from mwb.core.plan import paper
from mwb.core.presets import apply_preset

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "plan.md"
A100 = HARDWARE["a100-80gb"]


def _model(preset: str) -> ModelConfig:
    return apply_preset(RunConfig(), preset).model


# ------------------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("row", paper.TABLE1, ids=lambda r: r.preset)
def test_parameter_counts_match_table1(row):
    p = paper_parameter_count(row.layers, row.hidden, 51200, 2048)
    assert abs(p / 1e9 - row.params_b) <= 0.05  # the paper prints one decimal
    exact = count_parameters(ModelShape.from_config(_model(row.preset), 2048)).total
    assert abs(exact / 1e9 - row.params_b) <= 0.05
    # the formula leaves out only the final layer norm (2h)
    assert exact - p == pytest.approx(2 * row.hidden, abs=1e-3 * row.hidden)


def test_exact_count_of_other_shapes():
    # Mixtral 8x7B: 46.7 B parameters, 12.9 B active per token; Mistral 7B: 7.24 B
    m = ModelConfig(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                    ffn_hidden_size=14336, vocab_size=32000, normalization="rmsnorm", activation="swiglu",
                    position_embedding="rope", bias=False, tie_embeddings=False)
    dense = count_parameters(ModelShape.from_config(m, 4096))
    assert dense.total == 7_241_732_096 and dense.active == dense.total
    moe = count_parameters(ModelShape.from_config(ModelConfig(**{**m.__dict__, "num_experts": 8}), 4096))
    assert round(moe.total / 1e9, 1) == 46.7 and round(moe.active / 1e9, 1) == 12.9


@pytest.mark.parametrize("kw", [{}, dict(num_query_groups=2, normalization="rmsnorm", activation="swiglu",
                                         position_embedding="rope", bias=False, tie_embeddings=False),
                                 dict(activation="swiglu", num_query_groups=1)])
def test_exact_count_equals_the_real_model(kw):
    gpt = pytest.importorskip("mwb.core.models.gpt")
    from mwb.core.models.transformer import padded_vocab_size
    cfg = ModelConfig(vocab_size=1000, **kw)
    model = gpt.GPTModel(cfg, 1000, padded_vocab_size(1000, cfg.make_vocab_size_divisible_by, 1))
    real = sum(p.numel() for p in model.parameters())
    assert count_parameters(ModelShape.from_config(cfg, 128)).total == real


def test_rank_parameters_add_up():
    shape = ModelShape.from_config(_model("gpt-39b"), 2048)
    total = count_parameters(shape).total
    for pp, vpp in [(1, 1), (4, 1), (4, 3)]:
        ranks = sum(sum(rank_parameters(shape, 1, pp, vpp, 1, r)) for r in range(pp))
        tied_copy = shape.padded_vocab(1) * shape.h if pp > 1 else 0  # last stage's copy of the embedding
        assert ranks == total + tied_copy
    # tensor parallelism splits all but norms, row-parallel biases and position embeddings
    first = sum(rank_parameters(shape, 8, 4, 1, 1, 0))
    h, layers = shape.h, 12
    expected = layers * (12 * h * h + 7 * h) / 8 + layers * 6 * h + 51200 * h / 8 + 2048 * h
    assert first == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------- flops


def test_flops_hand_computation():
    # l=1, h=8, s=4, V=16, B=1: forward per token 2·12h² + 4·s·h + 2·h·V = 1536 + 128 + 256 = 1920
    assert model_flops_per_iteration(1, 4, 1, 8, 16) == pytest.approx(3 * 1920 * 4)
    assert paper_flops_per_iteration(1, 4, 1, 8, 16) == pytest.approx((4 * (1536 + 128) + 3 * 256) * 4)
    # the 1T row: 96·3072·2048·128·25600²·(1 + 2048/153600 + 51200/52428800)
    f = 96 * 3072 * 2048 * 128 * 25600**2 * (1 + 2048 / 153600 + 51200 / 52428800)
    assert paper_flops_per_iteration(3072, 2048, 128, 25600, 51200) == pytest.approx(f, rel=1e-12)
    assert f == pytest.approx(5.139e19, rel=1e-3)


@pytest.mark.parametrize("row", paper.TABLE1, ids=lambda r: r.preset)
def test_general_flops_equal_paper_formulas(row):
    shape = ModelShape.from_config(_model(row.preset), 2048)
    args = (row.batch, 2048, row.layers, row.hidden, 51200)
    assert flops_per_iteration(shape, row.batch, "full") == pytest.approx(paper_flops_per_iteration(*args))
    assert flops_per_iteration(shape, row.batch, "none") == pytest.approx(model_flops_per_iteration(*args))
    sel = flops_per_iteration(shape, row.batch, "selective") - flops_per_iteration(shape, row.batch, "none")
    assert sel == pytest.approx(4 * row.batch * 2048**2 * row.hidden * row.layers)  # Q·Kᵀ and scores·V again


# ------------------------------------------------------------------------------------------- activations


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_korthikanti_table(t, sp, recompute):
    if sp and t == 1:
        return
    s, b, h, a = 2048, 1, 12288, 96
    sbh, k = s * b * h, 5 * a * s / h
    expected = {("none", False): sbh * (10 + 24 / t + k / t), ("none", True): sbh * (34 / t + k / t),
                ("selective", False): sbh * (10 + 24 / t), ("selective", True): sbh * 34 / t,
                ("full", False): 2 * sbh, ("full", True): 2 * sbh / t}[(recompute, sp)]
    if t == 1 and recompute == "none":
        assert expected == pytest.approx(sbh * (34 + k))
    assert korthikanti_bytes_per_layer(s, b, h, a, t, sp, recompute) == pytest.approx(expected)
    assert activation_bytes_per_layer(s, b, h, a, t, sp, recompute) == pytest.approx(expected)


def test_activation_variants():
    base = dict(s=1024, b=2, h=4096, a=32, t=4, sp=True)
    full = activation_bytes_per_layer(**base)
    # fused attention keeps what selective recompute keeps, plus a float32 log-sum-exp per query and head
    lse = 4 * 1024 * 2 * 32 / 4
    flash = activation_bytes_per_layer(**base, flash=True)
    assert flash == activation_bytes_per_layer(**base, recompute="selective") + lse < full
    assert activation_bytes_per_layer(**base, dropout=False) < full
    assert activation_bytes_per_layer(**base, query_groups=8) < full  # smaller K and V
    assert activation_bytes_per_layer(**base, dtype_bytes=4) > full
    parts = activation_breakdown(**base)
    assert parts["softmax_dropout_mask"] == 1024 * 1024 * 2 * 32 / 4  # 1 byte per score


def test_pipeline_formulas():
    assert pipeline_bubble(8, 64) == 7 / 64 and pipeline_bubble(8, 64, 4) == 7 / 256
    assert inflight_microbatch_chunks(8, 64) == 8 and inflight_microbatch_chunks(8, 3) == 3
    assert inflight_microbatch_chunks(8, 64, rank=7) == 1
    p, v, L = 8, 4, 64
    chunks = inflight_microbatch_chunks(p, 64, v)
    assert chunks * L / (p * v) == pytest.approx(L * (1 + (p - 1) / (p * v)))


def test_bytes_per_parameter():
    assert bytes_per_parameter("bf16") == 18 and bytes_per_parameter("bf16", True, 8) == 6 + 12 / 8
    assert bytes_per_parameter("fp16") == 20 and bytes_per_parameter("fp16", True, 4) == 4 + 16 / 4
    assert bytes_per_parameter("fp32") == 16 and bytes_per_parameter("fp32", True, 2) == 8 + 8 / 2


def test_memory_of_one_layout():
    shape = ModelShape.from_config(_model("gpt-1t"), 2048)
    mm = MemoryModel(shape, 3072, "fp16")
    lay = Layout(tp=8, pp=64, dp=6, recompute="full")
    first = mm.rank_memory(lay, 0)
    assert first.weights == 2 * first.params and first.optimizer == 16 * first.params
    per_layer_input = 2 * 2048 * 25600  # full recompute keeps each layer's input, 2·s·b·h
    assert first.detail["layers"] == pytest.approx(64 * 2 * per_layer_input)  # p micro-batches × L/p layers
    assert mm.peak(lay).total <= A100.usable_bytes


# ------------------------------------------------------------------------------------------------ search


def test_search_1t_and_fixed_constraints():
    res = search(_model("gpt-1t"), Workload(3072, 3072), A100, Constraints(), 2048)
    assert round(res.params.total / 1e9, 1) == 1008.0
    assert res.fits and all(e.memory.total <= A100.usable_bytes for e in res.fits)
    times = [e.time_s for e in res.fits]
    assert times == sorted(times)
    fixed = search(_model("gpt-1t"), Workload(3072, 3072), A100,
                   Constraints(tp=8, pp=64, recompute="full", sp=False, distributed_optimizer=False), 2048)
    assert fixed.fits and {(e.layout.tp, e.layout.pp, e.layout.recompute, e.layout.sp,
                            e.layout.distributed_optimizer) for e in fixed.fits} == {(8, 64, "full", False, False)}


def test_nothing_fits_and_bad_layouts():
    with pytest.raises(MwbError, match="nothing fits"):
        plan(_model("gpt-1t"), Workload(8, 8), A100, Constraints(), 2048)
    with pytest.raises(LayoutError, match="tp=3"):
        plan(_model("gpt-1t"), Workload(64, 64), A100, Constraints(tp=3), 2048)


# ------------------------------------------------------------------------------------------------ Table 1


@pytest.fixture(scope="module")
def reproductions():
    return [paper.reproduce(r) for r in paper.TABLE1]


def test_doc_table_is_what_the_planner_produces(reproductions):
    assert paper.doc_block(DOC.read_text()) == paper.markdown(reproductions), (
        "docs/plan.md is stale: run python -m mwb.core.plan.paper --write")


@pytest.mark.parametrize("i", range(len(paper.TABLE1)))
def test_paper_layout_is_feasible(reproductions, i):
    row = paper.TABLE1[i]
    plain = Constraints(tp=row.tp, pp=row.pp, vpp=1, micro_batch_size=1, **paper.PAPER_FEATURES)
    res = search(_model(row.preset), Workload(row.gpus, row.batch, "fp16"), A100, plain, 2048)
    assert res.fits, f"{row.preset}: the paper's {row.tp}/{row.pp} does not fit the memory model"
    rep = reproductions[i]
    # the cost model predicts the paper's measured time to within 30% for every row
    assert 0.7 < rep.paper_2021.time_s / rep.implied_s < 1.3
