"""--precision fp8: e4m3/e5m2 casts with per-tensor current scaling. The roundtrip error is the format's
rounding bound (and reaches it); the fp8 linear layer's forward and gradients are the scaled-fp8 products; the
first and last layers stay bf16; a tiny GPT trained 30 steps in CPU emulation tracks bf16 within 2%."""
import copy

import pytest
import torch

from mwb.core.config import ConfigError
from mwb.core.models.fp8 import (E4M3, E5M2, FP8_MAX, Fp8Linear, apply_fp8, check_fp8, dequantize, fp8_layers,
                                 fp8_linear, fp8_mode_line, quantize, scaled_mm)
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import make_trainer, train_and_report

# (mantissa bits, smallest normal exponent, smallest subnormal exponent) of each format
FORMATS = {E4M3: (3, -6, -9), E5M2: (2, -14, -16)}


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_roundtrip_error_is_the_formats_rounding_bound(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200_000, generator=g) * torch.exp(torch.randn(200_000, generator=g) * 3)  # wide range
    q, scale_inv = quantize(x, dtype)
    assert q.dtype == dtype
    back = dequantize(q, scale_inv, torch.float32)
    mant, min_normal, min_sub = FORMATS[dtype]
    scaled = x.abs() / scale_inv  # where x lands on the fp8 grid
    assert float(scaled.max()) == pytest.approx(FP8_MAX[dtype], rel=1e-6)  # amax maps onto the format's max
    normal = scaled >= 2.0 ** min_normal
    rel = ((back - x).abs() / x.abs())[normal]
    u = 2.0 ** -(mant + 1)  # round to nearest: half an ulp of the leading bit
    bound = u / (1 + u)  # the worst case, x just below 1 + u (in units of its binade), rounded down to 1
    assert float(rel.max()) <= bound * (1 + 1e-5)
    assert float(rel.max()) > 0.98 * bound  # the bound is reached: this is the format's rounding, no better
    sub = ~normal & (x != 0)
    absolute = (back - x).abs()[sub] / scale_inv
    assert float(absolute.max()) <= 2.0 ** (min_sub - 1) * (1 + 1e-5)  # half the subnormal spacing


def test_fp8_linear_is_the_scaled_fp8_product_forward_and_backward():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, 32, generator=g, dtype=torch.bfloat16).requires_grad_()
    w = torch.randn(48, 32, generator=g, dtype=torch.bfloat16).requires_grad_()
    b = torch.randn(48, generator=g, dtype=torch.bfloat16).requires_grad_()
    y = fp8_linear(x, w, b)
    xq, sx = quantize(x.detach().reshape(-1, 32), E4M3)
    wq, sw = quantize(w.detach(), E4M3)
    want = (dequantize(xq, sx, torch.float32) @ dequantize(wq, sw, torch.float32).t() + b.detach().float())
    torch.testing.assert_close(y.float().reshape(-1, 48), want, rtol=1e-2, atol=1e-2)
    exact = x.detach().float() @ w.detach().float().t() + b.detach().float()
    rel = (y.float() - exact).norm() / exact.norm()
    assert 1e-3 < rel < 0.1  # fp8, not bf16: visibly coarser, still close
    gy = torch.randn(4, 8, 48, generator=g, dtype=torch.bfloat16)
    y.backward(gy)
    gq, sg = quantize(gy.reshape(-1, 48), E5M2)
    gd = dequantize(gq, sg, torch.float32)
    torch.testing.assert_close(x.grad.float().reshape(-1, 32), gd @ dequantize(wq, sw, torch.float32),
                               rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(w.grad.float(), gd.t() @ dequantize(xq, sx, torch.float32), rtol=1e-2, atol=5e-2)
    torch.testing.assert_close(b.grad.float(), gy.float().reshape(-1, 48).sum(0), rtol=1e-2, atol=1e-2)


def test_scaled_mm_emulation_scales_the_fp32_accumulation():
    a, sa = quantize(torch.randn(16, 32), E4M3)
    bq, sb = quantize(torch.randn(32, 16), E4M3)
    got = scaled_mm(a, sa, bq, sb, torch.float32)
    torch.testing.assert_close(got, (a.float() @ bq.float()) * sa * sb)


def tiny(precision, steps=30, layers=4):
    return {"model": {"num_layers": layers, "hidden_size": 64, "num_attention_heads": 4, "dropout": 0.0,
                      "max_position_embeddings": 64},
            "train": {"steps": steps, "micro_batch_size": 4, "global_batch_size": 8, "seq_length": 32, "seed": 3,
                      "precision": precision},
            "optim": {"lr": 3e-3, "warmup_steps": 3}}


def test_first_and_last_layers_stay_bf16():
    trainer = make_trainer(tiny("fp8", steps=1), 1)
    fp8 = {n for n, m in trainer.model.named_modules() if isinstance(m, Fp8Linear)}
    assert {n.split(".")[1] for n in fp8} == {"1", "2"} and len(fp8) == 2 * 6  # q k v o up down
    assert type(trainer.model.head) is torch.nn.Linear and trainer.model.layers["0"].attn.q_proj.__class__ \
        is torch.nn.Linear
    assert all(p.dtype == torch.bfloat16 for p in trainer.model.parameters())
    assert all(g.master.dtype == torch.float32 for g in trainer.optimizer.groups)  # fp32 masters, as in bf16
    assert apply_fp8(torch.nn.Module(), 4) == 0


def test_cpu_emulation_tracks_bf16_within_two_percent_over_30_steps(capfd):
    bf16 = [h.loss for h in make_trainer(tiny("bf16"), 1).run()]
    fp8 = [h.loss for h in make_trainer(tiny("fp8"), 1).run()]
    err = capfd.readouterr().err
    assert err.count("fp8 is emulated on CPU") == 1
    assert len(fp8) == 30 and bf16[-1] < bf16[0] - 0.3  # it trains
    worst = max(abs(a - b) / b for a, b in zip(fp8, bf16))
    assert worst < 0.02, worst
    assert fp8 != bf16  # the fp8 path ran


@pytest.mark.multiprocess
def test_fp8_under_tp2_uses_the_parallel_layers_gemm():
    """Column/row-parallel layers take the fp8 GEMM too. Each TP rank scales its own shard (per-shard amax, as
    transformer-engine without an amax reduction), so TP2 is close to one process, not equal."""
    one = train_and_report(0, 1, tiny("fp8", steps=4), grad_step=False)["losses"]
    t = copy.deepcopy(tiny("fp8", steps=4))
    t["parallel"] = {"tp": 2}
    two = run_ranks(train_and_report, 2, t, False)[0]["losses"]
    assert max(abs(a - b) / b for a, b in zip(two, one)) < 5e-3
    t["train"]["precision"] = "bf16"
    bf16 = run_ranks(train_and_report, 2, t, False)[0]["losses"]
    assert two != bf16


def test_scaled_mm_path_equals_the_emulation(monkeypatch):
    """The GPU path's calls (operand layouts, e5m2 × e4m3 in backward, fp32 weight gradient), run through
    torch's own CPU ``_scaled_mm`` kernel, give the emulation's results: the CUDA path is the same arithmetic."""
    import mwb.core.models.fp8 as fp8
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 8, 32, generator=g, dtype=torch.bfloat16).requires_grad_()
    w = torch.randn(48, 32, generator=g, dtype=torch.bfloat16).requires_grad_()
    gy = torch.randn(4, 8, 48, generator=g, dtype=torch.bfloat16)
    fp8.fp8_linear(x, w).backward(gy)
    want = [fp8.fp8_linear(x, w).detach(), x.grad.clone(), w.grad.clone()]
    x.grad = w.grad = None
    calls = []
    real = torch._scaled_mm

    def spy(*a, **k):
        calls.append(a[0].dtype)
        return real(*a, **k)
    monkeypatch.setattr(fp8, "native", lambda device: True)
    monkeypatch.setattr(torch, "_scaled_mm", spy)
    try:
        y = fp8.fp8_linear(x, w)
    except (RuntimeError, NotImplementedError) as e:  # a torch build without the CPU kernel
        pytest.skip(f"torch._scaled_mm has no CPU kernel here ({e})")
    y.backward(gy)
    assert calls == [E4M3, E5M2, E5M2]  # forward, input gradient, weight gradient
    for got, ref in zip((y.detach(), x.grad, w.grad), want):
        torch.testing.assert_close(got.float(), ref.float(), rtol=1e-2, atol=1e-2)


def test_the_run_says_on_how_many_layers_fp8_computes(capfd):
    trainer = make_trainer(tiny("fp8", steps=1, layers=4), 1)
    err = capfd.readouterr().err
    assert err.count("mwb: fp8 on 2 of 4 layers (the first and the last stay bf16); fp8 is emulated on CPU") == 1
    # the banner's count is the layers whose linears really are fp8
    fp8 = {n.split(".")[1] for n, m in trainer.model.named_modules() if isinstance(m, Fp8Linear)}
    assert len(fp8) == 2
    assert fp8_layers(4) == [1, 2] and fp8_layers(3) == [1] and fp8_layers(2) == [] and fp8_layers(1) == []
    assert "fp8 on 1 of 3 layers" in fp8_mode_line("cpu", 3)


@pytest.mark.parametrize("layers", [1, 2])
def test_fp8_without_a_layer_in_fp8_is_refused(layers):
    with pytest.raises(ConfigError, match=f"--precision fp8: a {layers}-layer model has no layer in fp8"):
        make_trainer(tiny("fp8", steps=1, layers=layers), 1)
    check_fp8(3)  # one layer in fp8: allowed
