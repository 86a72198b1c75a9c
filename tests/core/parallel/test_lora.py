"""LoRA under every layout: TP (column: B split, row: A split), SP, PP, DP and the distributed optimizer give
the per-step losses and adapter gradients of one process; the base is frozen and starts unchanged."""
import copy

import pytest
import torch

from mwb.core.config import ConfigError, LoRAConfig, RunConfig, update
from mwb.core.parallel.lora import apply_lora, merge_adapters, parse_targets
from mwb.core.parallel.state import single_process_state
from tests.core.parallel.lora_workers import lora_run
from tests.helpers.compare import assert_losses_match
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import VOCAB, make_trainer

BASE = {
    "model": {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "dropout": 0.0,
              "max_position_embeddings": 64},
    "train": {"steps": 5, "micro_batch_size": 1, "global_batch_size": 8, "seq_length": 16, "seed": 3},
    "optim": {"lr": 1e-2, "warmup_steps": 1},
    "lora": {"rank": 4, "alpha": 8.0},
}
LAYOUTS = {
    "tp2": (2, {"tp": 2}),
    "tp2_sp": (2, {"tp": 2, "sp": True}),
    "pp2": (2, {"pp": 2}),
    "dp2_distopt": (2, {"distributed_optimizer": True}),
    "pp2_tp2_sp": (4, {"pp": 2, "tp": 2, "sp": True}),
}


def tree(parallel=None, **sections):
    t = copy.deepcopy(BASE)
    t["parallel"] = dict(parallel or {})
    for k, v in sections.items():
        t.setdefault(k, {}).update(v)
    return t


@pytest.fixture(scope="module")
def reference():
    return lora_run(0, 1, tree())


def test_single_process_reference_trains_adapters_only(reference):
    losses = reference["losses"]
    assert losses[-1] < losses[0] - 1e-3, losses  # the adapters learn
    assert reference["frozen"] and all(".lora_" not in n for n in reference["frozen"])
    grads = reference["grads"]
    assert set(grads) and all(".lora_" in k for k in grads)
    assert all(k.endswith((".lora_A", ".lora_B")) for k in grads)
    # step 2: both A (through B ≠ 0) and B have gradients
    assert any(k.endswith(".lora_A") and grads[k].abs().max() > 0 for k in grads)
    lora = reference["lora"]
    # 4 layers × (q, k, v, o: r·(64+64) each; up: r·(64+256); down: r·(256+64)), r = 4
    assert lora["trainable"] == 4 * (4 * 4 * 128 + 2 * 4 * 320)
    assert lora["base"] is None and lora["prefixes"] == [""]


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_lora_layout_matches_single_process(reference, name):
    world, parallel = LAYOUTS[name]
    results = run_ranks(lora_run, world, tree(parallel))
    assert_losses_match(name, results[0]["losses"], reference["losses"])
    grads = {}
    for r in results:
        grads.update(r["grads"])
    assert set(grads) == set(reference["grads"])
    for k, want in reference["grads"].items():
        torch.testing.assert_close(grads[k], want, rtol=1e-4, atol=1e-7, msg=f"{name}: gradient of {k}")
    for r in results:
        assert r["lora"]["trainable"] == reference["lora"]["trainable"]
        assert r["lora"]["frozen"] == reference["lora"]["frozen"]


def test_base_unchanged_at_start_and_frozen_after_training():
    base = make_trainer(tree(lora={"rank": 0}, train={"steps": 2}), 1)
    lora = make_trainer(tree(train={"steps": 2}), 1)
    ids = torch.randint(0, VOCAB, (2, 12))
    base.model.eval(), lora.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(lora.model(tokens=ids), base.model(tokens=ids), rtol=0, atol=0)
    before = {n: p.detach().clone() for n, p in lora.model.named_parameters() if not p.requires_grad}
    lora.run()
    after = dict(lora.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert sum(p.numel() for g in lora.optimizer.groups for p in [g.master]) == lora.lora["trainable"]


def test_targets_and_merge():
    cfg = update(RunConfig(), tree(lora={"rank": 2, "targets": "proj,fc2"}))
    from mwb.core.compose import build_model
    model = build_model(cfg.model, single_process_state(), VOCAB, 3)
    info = apply_lora(model, cfg.lora, single_process_state(), 3)
    assert sorted({a.rsplit(".", 1)[1] for a in info.adapters}) == ["down_proj", "o_proj"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".lora_B"):
                p.normal_()
    ids = torch.randint(0, VOCAB, (2, 9))
    model.eval()
    with torch.no_grad():
        want = model(tokens=ids)
    tensors = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = merge_adapters(tensors, cfg.lora.scale)
    assert not any(".lora_" in k for k in merged)
    plain = build_model(cfg.model, single_process_state(), VOCAB, 3)
    with torch.no_grad():
        for n, p in plain.named_parameters():
            p.copy_(merged[n])
        torch.testing.assert_close(plain.eval()(tokens=ids), want, rtol=1e-5, atol=1e-5)
        assert (plain(tokens=ids) - model.eval()(tokens=ids)).abs().max() < 1e-5


@pytest.mark.parametrize("lora,needle", [({"targets": "qkv,mlp"}, "--lora-targets"),
                                         ({"dropout": 1.0}, "--lora-dropout"), ({"alpha": 0.0}, "--lora-alpha")])
def test_bad_lora_settings_are_config_errors(lora, needle):
    with pytest.raises(ConfigError, match=needle):
        make_trainer(tree(lora=lora), 1)


def test_parse_targets_and_scale():
    assert parse_targets("qkv, fc1") == ("qkv", "fc1")
    assert LoRAConfig(rank=8).scale == 1.0 and LoRAConfig(rank=8, alpha=16).scale == 2.0
