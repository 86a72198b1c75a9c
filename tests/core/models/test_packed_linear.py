"""oneDNN-packed inference linears (:mod:`mwb.core.models.packed_linear`) against ``F.linear``: the same values
within fp32 rounding for plain and tensor-parallel linears (2-D and 3-D inputs, with and without bias), the
plain path bitwise when autograd is on or the product is below ``MIN_PACKED_MACS``, a repack when the weight
changes, and an exact undo; and a whole tiny GPT's logits and greedy generation packed against unpacked.
The products here are small, so the tests that check the packed path lower the bound to 0."""
import pytest
import torch

import mwb.core.models.packed_linear as packed_linear
import torch.nn.functional as F
from torch import nn

from mwb.core.config import RunConfig, update
from mwb.core.compose import build_model
from mwb.core.models.packed_linear import PackedGemm, PackedLinear, pack_linears, packing_available, unpack_linears
from mwb.core.parallel.state import single_process_state
from mwb.core.parallel.tensor_parallel import ColumnParallelLinear
from mwb.core.presets import apply_preset

needs_onednn = pytest.mark.skipif(not packing_available(torch.float32), reason="oneDNN packed linear unavailable")


def _spy(monkeypatch) -> list:
    """Record the input shape of every product that goes through oneDNN."""
    calls = []
    real = packed_linear.packed_product

    def spy(x, packed, bias):
        calls.append(tuple(x.shape))
        return real(x, packed, bias)
    monkeypatch.setattr(packed_linear, "packed_product", spy)
    return calls


@pytest.fixture
def counted(monkeypatch):
    """Every product packed (no lower bound), and the products that went through oneDNN."""
    monkeypatch.setattr(packed_linear, "MIN_PACKED_MACS", 0)
    return _spy(monkeypatch)


def _linear(bias: bool, seed: int = 0) -> nn.Linear:
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(24, 40, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(40, 24, generator=g))
        if bias:
            lin.bias.copy_(torch.randn(40, generator=g))
    return lin


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(5, 24), (3, 7, 24)])
def test_packed_linear_equals_f_linear(bias, shape, counted):
    lin = _linear(bias)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    want = F.linear(x, lin.weight, lin.bias)
    assert pack_linears(lin) == 1 and type(lin) is PackedLinear
    with torch.no_grad():
        got = lin(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # non-contiguous input (a transposed view) too
    xt = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    with torch.no_grad():
        torch.testing.assert_close(lin(xt), want, rtol=1e-5, atol=1e-5)
    assert counted == [shape, shape]


@pytest.mark.skipif(not packing_available(torch.bfloat16), reason="oneDNN bf16 linear unavailable on this CPU")
def test_bf16_linear_is_packed_and_equals_f_linear(counted):
    lin = _linear(True).to(torch.bfloat16)
    x = torch.randn(6, 24, generator=torch.Generator().manual_seed(10)).to(torch.bfloat16)
    want = F.linear(x.float(), lin.weight.float(), lin.bias.float())
    assert pack_linears(lin) == 1
    with torch.no_grad():
        got = lin(x)
    assert got.dtype == torch.bfloat16 and counted == [(6, 24)]
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=5e-2)


@needs_onednn
def test_autograd_takes_f_linear_bitwise_and_gradients_flow(counted):
    lin, ref = _linear(True), _linear(True)
    pack_linears(lin)
    x = torch.randn(4, 24, generator=torch.Generator().manual_seed(2))
    y, want = lin(x), ref(x)
    assert torch.equal(y, want) and counted == []
    y.sum().backward()
    want.sum().backward()
    assert torch.equal(lin.weight.grad, ref.weight.grad) and torch.equal(lin.bias.grad, ref.bias.grad)


@needs_onednn
def test_products_below_the_bound_take_f_linear_bitwise(monkeypatch):
    calls = _spy(monkeypatch)
    lin = _linear(True)
    pack_linears(lin)
    x = torch.randn(5, 24, generator=torch.Generator().manual_seed(8))
    assert 5 * 24 * 40 < packed_linear.MIN_PACKED_MACS
    with torch.no_grad():
        assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias)) and calls == []
        monkeypatch.setattr(packed_linear, "MIN_PACKED_MACS", 5 * 24 * 40)  # now exactly at the bound
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    assert calls == [(5, 24)]


@needs_onednn
def test_weight_changed_in_place_or_replaced_is_repacked(counted):
    lin = _linear(False)
    pack_linears(lin)
    x = torch.randn(3, 24, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        lin.weight.mul_(-2.0)  # in place: the version counter moves
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight), rtol=1e-5, atol=1e-5)
        lin.weight = nn.Parameter(torch.randn(40, 24, generator=torch.Generator().manual_seed(4)))
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight), rtol=1e-5, atol=1e-5)
    assert len(counted) == 2


@needs_onednn
def test_tensor_parallel_gemm_is_packed_and_fp8_gemm_left_alone(counted):
    col = ColumnParallelLinear(24, 40, bias=True, group=None)
    with torch.no_grad():
        col.weight.copy_(torch.randn(40, 24, generator=torch.Generator().manual_seed(5)))
        col.bias.zero_().add_(0.5)
    x = torch.randn(2, 3, 24, generator=torch.Generator().manual_seed(6))
    want = F.linear(x, col.weight, col.bias)
    assert pack_linears(col) == 1 and isinstance(col.gemm, PackedGemm)
    with torch.no_grad():
        torch.testing.assert_close(col(x), want, rtol=1e-5, atol=1e-5)
    assert counted == [(2, 3, 24)]
    assert unpack_linears(col) == 1 and col.gemm is F.linear
    other = ColumnParallelLinear(24, 40, bias=False, group=None)

    def fp8_like(x, w, b):
        return F.linear(x, w, b)
    other.gemm = fp8_like
    assert pack_linears(other) == 0 and other.gemm is fp8_like


@needs_onednn
def test_a_deep_copy_or_pickle_packs_its_own_weight(counted):
    import copy
    import pickle
    lin = _linear(True)
    pack_linears(lin)
    x = torch.randn(3, 24, generator=torch.Generator().manual_seed(9))
    for twin in (copy.deepcopy(lin), pickle.loads(pickle.dumps(lin))):
        assert type(twin) is PackedLinear and twin.packed_gemm.packed is None
        with torch.no_grad():
            twin.weight.mul_(3.0)  # its own weight: the original's products must not change
            torch.testing.assert_close(twin(x), F.linear(x, twin.weight, twin.bias), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    assert len(counted) == 4


@needs_onednn
def test_unpack_restores_plain_linears_and_state_dict():
    lin = _linear(True)
    before = {k: v.clone() for k, v in lin.state_dict().items()}
    pack_linears(lin)
    assert list(lin.state_dict()) == list(before)
    assert unpack_linears(lin) == 1 and type(lin) is nn.Linear and not hasattr(lin, "packed_gemm")
    for k, v in lin.state_dict().items():
        assert torch.equal(v, before[k])


def test_nothing_packed_where_onednn_cannot_run(monkeypatch):
    import mwb.core.models.packed_linear as pl
    monkeypatch.setattr(pl, "packing_available", lambda dtype=torch.float32: False)
    lin = _linear(False)
    assert pl.pack_linears(lin) == 0 and type(lin) is nn.Linear


def _tiny_gpt(vocab: int = 96):
    cfg = update(apply_preset(RunConfig(), "gpt-tiny"), {"model": {"dropout": 0.0, "vocab_size": vocab}})
    return build_model(cfg.model, single_process_state(), vocab, seed=3).eval()


@needs_onednn
def test_packed_gpt_logits_and_greedy_generation_match_unpacked(counted):
    from mwb.evaluation.generation import SamplingParams, generate
    from mwb.evaluation.lm import LanguageModel

    class Ids:  # token ids in, token ids out: the model alone is under test
        vocab_size, eod, path = 96, None, None

        def encode(self, text):
            return [int(t) for t in text.split()]

        def decode(self, ids):
            return " ".join(map(str, ids))

    plain = LanguageModel(_tiny_gpt(), Ids())
    packed = LanguageModel(_tiny_gpt(), Ids(), pack_weights=True)
    linears = sum(type(m) is nn.Linear for m in plain.model.modules())
    assert linears > 0 and packed.packed_linears == linears
    tokens = torch.randint(0, 96, (3, 20), generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(packed.logits(tokens), plain.logits(tokens), rtol=1e-4, atol=1e-4)
    assert len(counted) == linears
    prompts = [" ".join(str(int(t)) for t in row[: 4 + 5 * i]) for i, row in enumerate(tokens)]
    params = SamplingParams(max_tokens=12, temperature=0.0, stop_at_eod=False)
    ours, ref = generate(packed, prompts, params, batch_size=3), generate(plain, prompts, params, batch_size=3)
    assert [g.tokens for g in ours] == [g.tokens for g in ref]
    for a, b in zip(ours, ref):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=1e-4, atol=1e-4)
