"""The flat-buffer optimizer (one update per buffer) gives the parameters torch's per-parameter optimizer
gives (the step this repository took before): same weight-decay rule (biases and 1-D weights not decayed),
same unscaling and clipping. Tolerance 1e-6 relative to each parameter's largest element: Adam/AdamW
run torch's fused kernel on the flat tensor, which agrees with the per-parameter path to about an ulp
(SGD runs the same single-tensor ops and agrees exactly).
"""
import copy

import pytest
import torch
from torch import nn

from mwb.core.optim.optimizer import no_weight_decay
from tests.helpers.distributed import run_ranks
from tests.helpers.workers import make_trainer

TREE = {"model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "dropout": 0.0,
                  "max_position_embeddings": 32},
        "train": {"steps": 3, "micro_batch_size": 2, "global_batch_size": 4, "seq_length": 16, "seed": 11},
        "optim": {"lr": 1e-2, "weight_decay": 0.1, "clip_grad": 0.05, "lr_schedule": "constant"}}


def _reference(trainer) -> tuple[torch.optim.Optimizer, dict]:
    """Per-parameter torch optimizer over copies of the model's parameters, decay groups as Megatron's."""
    c = trainer.cfg.optim
    copies = {n: nn.Parameter(p.detach().float().clone()) for n, p in trainer.model.named_parameters()}
    decay = [p for n, p in copies.items() if not no_weight_decay(n, p)]
    rest = [p for n, p in copies.items() if no_weight_decay(n, p)]
    groups = [{"params": decay, "weight_decay": c.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    kind = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}.get(c.name)
    if kind is not None:
        opt = kind(groups, lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps, foreach=False)
    else:
        opt = torch.optim.SGD(groups, lr=c.lr, momentum=c.momentum, foreach=False)
    return opt, copies


def _compare(name: str) -> float:
    tree = copy.deepcopy(TREE)
    tree["optim"]["name"] = name
    trainer = make_trainer(tree, 1)
    ref, copies = _reference(trainer)
    worst = 0.0
    for _ in range(3):
        before = {n: p.main_grad for n, p in trainer.model.named_parameters()}
        opt = trainer.optimizer
        orig_apply = opt.apply

        def apply(lr, loss_scale=1.0, grad_scale=1.0):
            grads = {n: g.detach().clone() * (grad_scale / loss_scale) for n, g in before.items()}
            norm = torch.sqrt(sum(g.double().pow(2).sum() for g in grads.values())).item()
            coef = min(1.0, trainer.cfg.optim.clip_grad / (norm + 1e-6)) if norm > trainer.cfg.optim.clip_grad else 1.0
            for n, p in copies.items():
                p.grad = grads[n] * coef if coef != 1.0 else grads[n]
            for g in ref.param_groups:
                g["lr"] = lr
            ref.step()
            return orig_apply(lr, loss_scale, grad_scale)
        opt.apply = apply
        trainer.train_step()
        opt.apply = orig_apply
        for n, p in trainer.model.named_parameters():
            diff = (p.detach() - copies[n]).abs().max().item() / max(copies[n].abs().max().item(), 1e-12)
            worst = max(worst, diff)
    return worst


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
def test_flat_step_matches_per_parameter_torch_optimizer(name):
    assert _compare(name) <= 1e-6


def test_decayed_parameters_form_one_prefix_of_the_buffer():
    trainer = make_trainer(TREE, 1)
    g = trainer.optimizer.groups[0]
    buf = trainer.optimizer.buffers[0]
    flags = [no_weight_decay(s.name, s.param) for s in buf.slots]
    assert flags == sorted(flags) and 0 < g.decay_end < buf.numel
    assert g.decay_end == sum(s.numel for s in buf.slots if not no_weight_decay(s.name, s.param))


def _dist_params(rank, world, tree):
    trainer = make_trainer(tree, world)
    trainer.run()
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.multiprocess
def test_distributed_optimizer_shards_give_the_same_parameters():
    """DP2 with sharded (ZeRO-1) flat groups, each shard cutting the decayed prefix somewhere, against DP2
    with the whole buffer on each rank (same gradient sums, so only the sharding differs)."""
    tree = copy.deepcopy(TREE)
    tree["parallel"] = {"distributed_optimizer": False}
    whole = run_ranks(_dist_params, 2, tree)[0]
    tree["parallel"] = {"distributed_optimizer": True}
    sharded = run_ranks(_dist_params, 2, tree)[0]
    for n, p in whole.items():
        assert torch.allclose(sharded[n], p, rtol=1e-6, atol=1e-7), n
