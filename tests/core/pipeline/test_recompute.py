"""Activation recomputation replays dropout exactly: with dropout > 0, every recompute mode gives gradients
bit-identical to no recomputation, on one process and with TP2 (model-parallel RNG stream, with and
without sequence parallelism)."""
import pytest
import torch

from mwb.core.config import ModelConfig, ParallelConfig
from mwb.core.compose import build_model
from mwb.core.parallel.dims import ParallelDims
from mwb.core.parallel.random import get_rng_tracker, seed_everything
from mwb.core.parallel.recompute import apply_recompute
from mwb.core.parallel.state import build_state, single_process_state
from tests.helpers.distributed import run_ranks

VOCAB, SEQ = 96, 16
MODEL = ModelConfig(num_layers=4, hidden_size=32, num_attention_heads=4, dropout=0.2,
                    max_position_embeddings=SEQ, make_vocab_size_divisible_by=8)
MODES = {
    "none": ParallelConfig(),
    "selective": ParallelConfig(recompute="selective"),
    "full_uniform_1": ParallelConfig(recompute="full"),
    "full_uniform_2": ParallelConfig(recompute="full", recompute_num_layers=2),
    "full_block_3": ParallelConfig(recompute="full", recompute_method="block", recompute_num_layers=3),
}


def grads_for(mode: str, state, steps: int = 2) -> tuple[dict, list]:
    """Gradients after ``steps`` forward/backward passes (the RNG streams advance between them) and the
    RNG states at the end (recomputation must leave the live streams where they would be without it)."""
    seed_everything(11, state.tp_rank)
    model = build_model(MODEL, state, VOCAB, seed=5)
    apply_recompute(model, MODES[mode])
    model.train()
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (2, SEQ + 1), generator=g)
        loss, _ = model(tokens=tokens[:, :-1], labels=tokens[:, 1:])
        loss.backward()
    rng = [torch.get_rng_state(), get_rng_tracker().get_states()]
    return {n: p.grad.clone() for n, p in model.named_parameters()}, rng


def compare_modes(state) -> dict:
    ref, ref_rng = grads_for("none", state)
    out = {}
    for mode in MODES:
        if mode == "none":
            continue
        got, rng = grads_for(mode, state)
        same = all(torch.equal(got[k], ref[k]) for k in ref)
        same_rng = torch.equal(rng[0], ref_rng[0]) and all(
            torch.equal(rng[1][k], ref_rng[1][k]) for k in ref_rng[1])
        out[mode] = (same, same_rng)
    return out


def test_dropout_is_active():
    """Guard against a vacuous test: two different seeds must give different gradients."""
    state = single_process_state()
    a, _ = grads_for("none", state)
    seed_everything(12)
    model = build_model(MODEL, state, VOCAB, seed=5)
    tokens = torch.randint(0, VOCAB, (2, SEQ + 1), generator=torch.Generator().manual_seed(0))
    model(tokens=tokens[:, :-1], labels=tokens[:, 1:])[0].backward()
    assert any(not torch.equal(a[n], p.grad) for n, p in model.named_parameters())


def test_recompute_single_process_bit_identical():
    for mode, (same, same_rng) in compare_modes(single_process_state()).items():
        assert same, f"recompute {mode}: gradients differ from no recomputation"
        assert same_rng, f"recompute {mode}: RNG streams end elsewhere than without recomputation"


def _tp_worker(rank, world):
    torch.manual_seed(0)
    out = {}
    for sp in (False, True):
        state = build_state(ParallelDims(world_size=2, tp=2, sp=sp))
        out[sp] = compare_modes(state)
    return out


@pytest.mark.multiprocess
def test_recompute_tp2_bit_identical():
    for rank, res in enumerate(run_ranks(_tp_worker, 2)):
        for sp, modes in res.items():
            for mode, (same, same_rng) in modes.items():
                assert same, f"TP2 (sp={sp}) rank {rank}, recompute {mode}: gradients differ"
                assert same_rng, f"TP2 (sp={sp}) rank {rank}, recompute {mode}: RNG streams differ"


def test_recompute_rejects_bad_settings():
    state = single_process_state()
    model = build_model(MODEL, state, VOCAB, seed=5)
    with pytest.raises(ValueError, match="recompute_method"):
        apply_recompute(model, ParallelConfig(recompute="full", recompute_method="everything"))
    with pytest.raises(ValueError, match="parallel.recompute must be"):
        apply_recompute(build_model(MODEL, state, VOCAB, seed=5), ParallelConfig(recompute="some"))
