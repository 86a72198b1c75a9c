"""Per-rank functions for the equivalence tests (importable by spawned ranks)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from mwb.core.config import RunConfig, update
from mwb.core.models.init import is_output_head
from mwb.core.parallel.collectives import group_size
from mwb.core.training.batches import SyntheticTokens
from mwb.core.training.model_spec import GPTSpec
from mwb.core.training.trainer import Trainer

VOCAB = 200


def make_trainer(tree: dict, world: int) -> Trainer:
    cfg = update(RunConfig(), tree)
    data = SyntheticTokens(VOCAB, cfg.train.seq_length, seed=7)
    return Trainer(cfg, GPTSpec(cfg, VOCAB), data, world_size=world)


def full_grads(trainer: Trainer, loss_scale: float, grad_scale: float) -> dict:
    """Every parameter's reduced gradient, gathered to its full (unsharded) shape, keyed by name."""
    opt, st = trainer.optimizer, trainer.state
    for buf in opt.buffers:
        if opt.distributed and buf.group is not None:  # reassemble the reduce-scattered shards
            parts = list(buf.grads.chunk(buf.shards))
            mine = parts[dist.get_rank(buf.group)].clone()
            dist.all_gather(parts, mine, group=buf.group)
    out = {}
    for chunk in trainer.chunks:
        for name, p in chunk.named_parameters():
            if getattr(chunk, "shares_embedding", False) and is_output_head(name):
                continue  # the last stage's tied copy: equal to embed.word.weight's after the reduction
            g = p.main_grad.detach().float() * (grad_scale / loss_scale)
            dim = getattr(p, "tp_dim", None)
            if dim is not None and group_size(st.tp_group) > 1:
                parts = [torch.empty_like(g) for _ in range(st.tp_size)]
                dist.all_gather(parts, g.contiguous(), group=st.tp_group)
                g = torch.cat(parts, dim=dim)
            if getattr(p, "expert", False) and group_size(st.ep_group) > 1:  # experts sharded over EP
                parts = [torch.empty_like(g) for _ in range(st.ep_size)]
                dist.all_gather(parts, g.contiguous(), group=st.ep_group)
                g = torch.cat(parts, dim=0)
            # padded vocab rows (their count depends on TP) dropped; the head's vocab bias (BERT, T5) too
            if name.endswith("word.weight") or is_output_head(name) or name == "head.bias" \
                    or name.endswith(".head.bias"):
                g = g[:trainer.spec.vocab_size]
            out[name] = g.clone()
    return out


def train_and_report(rank: int, world: int, tree: dict, grad_step: bool = True) -> dict:
    """Losses of every step; gathered gradients of step 1 (taken before clipping and the update)."""
    return report_run(make_trainer(tree, world), grad_step)


def capture_first_grads(trainer: Trainer) -> dict:
    """Make the optimizer record the gathered full gradients of its first step (taken before clipping and
    the update) under ``"grads"`` of the returned dict, which stays empty until that step."""
    box: dict = {}
    orig_apply = trainer.optimizer.apply

    def apply(lr, loss_scale=1.0, grad_scale=1.0):
        if "grads" not in box:
            box["grads"] = full_grads(trainer, loss_scale, grad_scale)
        return orig_apply(lr, loss_scale, grad_scale)
    trainer.optimizer.apply = apply
    return box


def report_run(trainer: Trainer, grad_step: bool = True) -> dict:
    """Train ``trainer`` to the end: its losses, grad norms, skipped steps and gathered step-1 gradients."""
    box = capture_first_grads(trainer) if grad_step else {}
    history = trainer.run()
    return {"losses": [h.loss for h in history], "grads": box.get("grads"),
            "norms": [h.grad_norm for h in history], "skipped": [h.skipped for h in history]}
