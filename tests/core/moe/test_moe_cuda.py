"""The grouped expert kernels on a GPU agree with the per-expert loop (skipped without CUDA)."""
import pytest
import torch

from mwb.core.config import ModelConfig
from mwb.core.models.moe import MoELayer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("impl", ["bmm", "grouped_mm", "auto"])
def test_cuda_grouped_experts_match_loop(impl, dtype):
    cfg = ModelConfig(hidden_size=64, num_experts=8, moe_top_k=2, moe_ffn_hidden_size=128, activation="swiglu")
    x = torch.randn(2, 64, 64, generator=torch.Generator().manual_seed(0)).cuda().to(dtype)
    out = {}
    for name in ("loop", impl):
        torch.manual_seed(0)
        layer = MoELayer(cfg, name)
        for p in layer.parameters():
            torch.nn.init.normal_(p, std=0.1)
        layer = layer.cuda().to(dtype)
        xi = x.clone().requires_grad_()
        y = layer(xi)
        y.float().square().sum().backward()
        out[name] = (y.float(), xi.grad.float(), layer.experts.w1.grad.float())
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    for a, b in zip(out[impl], out["loop"]):
        torch.testing.assert_close(a, b, **tol)
