"""The MoE layer on one process: grouped experts, routing, aux losses, capacity dropping, counts."""
import math

import pytest
import torch

from mwb.core.config import ModelConfig, RunConfig, update
from mwb.core.models import moe
from mwb.core.models.arch import count_params
from mwb.core.models.moe import MoELayer, capacity_keep, expert_capacity, load_balancing_loss, route, z_loss
from mwb.core.parallel.dims import LayoutError


def small_cfg(**kw) -> ModelConfig:
    base = dict(hidden_size=16, num_experts=4, moe_top_k=2, moe_ffn_hidden_size=32, bias=False)
    base.update(kw)
    return ModelConfig(**base)


def make_layer(cfg: ModelConfig, impl: str = "auto", seed: int = 0) -> MoELayer:
    torch.manual_seed(seed)
    layer = MoELayer(cfg, impl)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return layer


def run(layer, x):
    x = x.clone().requires_grad_()
    y = layer(x)
    (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
@pytest.mark.parametrize("impl", ["bmm", "grouped_mm"])
def test_grouped_experts_match_per_expert_loop(activation, impl):
    cfg = small_cfg(activation=activation)
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
    ref = run(make_layer(cfg, "loop"), x)
    got = run(make_layer(cfg, impl), x)
    torch.testing.assert_close(got[0], ref[0])
    torch.testing.assert_close(got[1], ref[1])
    for name in ref[2]:
        torch.testing.assert_close(got[2][name], ref[2][name], msg=name)


@pytest.mark.parametrize("score,pre", [("softmax", False), ("softmax", True), ("sigmoid", False)])
def test_dropless_layer_matches_per_token_reference(score, pre):
    cfg = small_cfg(moe_router_score=score, moe_router_pre_softmax=pre, moe_shared_expert_ffn_hidden_size=8)
    layer = make_layer(cfg).eval()
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = layer(x)[0]
        logits = x[0] @ layer.router.weight.T
        ex = layer.experts
        for t in range(6):
            if score == "softmax" and pre:
                p = torch.softmax(logits[t], -1)
                w, idx = p.topk(2)
            elif score == "softmax":
                top, idx = logits[t].topk(2)
                w = torch.softmax(top, -1)
            else:
                s, idx = torch.sigmoid(logits[t]).topk(2)
                w = s / s.sum()
            ref = layer.shared_expert(x[0, t])
            for wi, e in zip(w, idx):
                ref = ref + wi * (torch.nn.functional.gelu(x[0, t] @ ex.w1[e]) @ ex.w2[e])
            torch.testing.assert_close(y[t], ref, rtol=1e-5, atol=1e-6)


def test_aux_losses_equal_formula_on_fixed_input():
    # Uniform logits: every token picks expert 0 (ties go to the lower index) → f = [1, 0], P = [½, ½].
    w, e, probs = route(torch.zeros(4, 2), k=1)
    assert e.flatten().tolist() == [0, 0, 0, 0]
    assert load_balancing_loss(probs, e, 2).item() == pytest.approx(1.0)
    assert z_loss(torch.zeros(3, 4)).item() == pytest.approx(math.log(4) ** 2)
    # A random input against the formula written as loops: E · Σ_e (count_e / (T·k)) · mean_t p_te.
    logits = torch.randn(10, 4, generator=torch.Generator().manual_seed(3))
    w, e, probs = route(logits, k=2)
    ref = 0.0
    for j in range(4):
        frac = sum(int(j in e[t].tolist()) for t in range(10)) / 20
        ref += frac * sum(math.exp(logits[t, j]) / sum(math.exp(v) for v in logits[t]) for t in range(10)) / 10
    assert load_balancing_loss(probs, e, 4).item() == pytest.approx(4 * ref, rel=1e-6)
    lse = [math.log(sum(math.exp(v) for v in row)) for row in logits.tolist()]
    assert z_loss(logits).item() == pytest.approx(sum(v * v for v in lse) / 10, rel=1e-6)


def test_aux_loss_gradient_joins_the_objective():
    """Training mode: grads = d(out·c)/dθ + scale · d(coeff·balance + z_coeff·z)/dθ."""
    cfg = small_cfg(moe_aux_loss_coeff=0.5, moe_z_loss_coeff=0.1)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(4))
    c = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(5))
    layer = make_layer(cfg)
    moe.reset_aux_losses()
    moe.set_aux_loss_scale(3.0)
    try:
        (layer(x) * c).sum().backward()
        got = layer.router.weight.grad.clone()
        sums = moe.aux_loss_sums()
        layer.zero_grad()
        layer.eval()  # no aux attached in eval: build the objective by hand
        logits = x.reshape(10, 16) @ layer.router.weight.T
        w, e, probs = route(logits, 2)
        aux = 0.5 * load_balancing_loss(probs, e, 4) + 0.1 * z_loss(logits)
        ((layer(x) * c).sum() + 3.0 * aux).backward()
    finally:
        moe.set_aux_loss_scale(1.0)
        moe.reset_aux_losses()
    torch.testing.assert_close(got, layer.router.weight.grad)
    assert sums["moe_aux_loss"] == pytest.approx(0.5 * load_balancing_loss(probs, e, 4).item(), rel=1e-6)
    assert sums["moe_z_loss"] == pytest.approx(0.1 * z_loss(logits).item(), rel=1e-6)


def test_capacity_drops_lowest_scores_per_expert():
    experts = torch.tensor([[0, 1], [0, 1], [0, 2], [0, 3], [1, 0], [2, 3]])
    weights = torch.tensor([[.6, .4], [.7, .3], [.5, .5], [.6, .4], [.9, .1], [.6, .4]])
    keep = capacity_keep(experts, weights, 4, capacity=2)
    # expert 0 has slots with weights .6 .7 .5 .6 .1 → keeps .7 (token 1) and the first .6 (token 0);
    # expert 1: .4 .3 .9 → keeps .9 and .4; experts 2, 3 are under capacity.
    assert keep.tolist() == [[True, True], [True, False], [False, True], [False, True], [True, False],
                             [True, True]]
    assert expert_capacity(num_tokens=6, k=2, num_experts=4, factor=1.0) == 3
    assert expert_capacity(num_tokens=6, k=2, num_experts=4, factor=0.5) == 2


def test_capacity_layer_drop_count_matches_reference():
    cfg = small_cfg(moe_capacity_factor=1.0)
    layer = make_layer(cfg).eval()
    x = torch.randn(2, 16, 16, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        layer(x)
        w, e, _ = route(x.reshape(32, 16) @ layer.router.weight.T, 2)
    cap = expert_capacity(32, 2, 4, 1.0)
    expected = sum(max(0, int((e == j).sum()) - cap) for j in range(4))
    assert expected > 0 and layer.last_dropped == expected


def test_count_params_total_and_active():
    cfg = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_experts=4, moe_top_k=2,
                      moe_layer_freq=2, max_position_embeddings=64)
    got = count_params(cfg, vocab_size=200)
    h, f, v = 64, 256, 256  # vocab padded to a multiple of 128, tied head
    attn = 4 * (h * h + h)
    norms = 2 * 2 * h
    dense_mlp = h * f + f + f * h + h
    moe_layer = h * 4 + 4 * 2 * h * f
    total = v * h + 64 * h + 2 * (attn + norms) + dense_mlp + moe_layer + 2 * h
    assert got == {"total": total, "active": total - 2 * 2 * h * f}


def test_experts_not_divisible_by_ep_is_a_layout_error():
    from mwb.core.training.trainer import parallel_dims
    cfg = update(RunConfig(), {"model": {"num_experts": 3}, "parallel": {"ep": 2}})
    with pytest.raises(LayoutError, match="number of experts 3 is not divisible by ep 2"):
        parallel_dims(cfg, 2)


@pytest.mark.parametrize("key,value", [("moe_top_k", 5), ("moe_router_score", "relu"),
                                       ("moe_dispatcher", "nccl"), ("moe_capacity_factor", 0.0)])
def test_bad_moe_settings_are_config_errors(key, value):
    from mwb.core.config import ConfigError
    with pytest.raises(ConfigError, match=f"model.{key}"):
        MoELayer(small_cfg(**{key: value}))
