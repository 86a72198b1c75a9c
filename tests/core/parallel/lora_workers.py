"""Per-rank functions for the LoRA layout tests (importable by spawned ranks)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from mwb.core.parallel.collectives import group_size
from tests.helpers.workers import make_trainer


def adapter_grads(trainer) -> dict:
    """Every trainable parameter's reduced gradient, gathered to its full shape (TP shards concatenated)."""
    opt, st = trainer.optimizer, trainer.state
    for buf in opt.buffers:
        if opt.distributed and buf.group is not None:
            parts = list(buf.grads.chunk(buf.shards))
            mine = parts[dist.get_rank(buf.group)].clone()
            dist.all_gather(parts, mine, group=buf.group)
    out = {}
    for chunk in trainer.chunks:
        for name, p in chunk.named_parameters():
            if not p.requires_grad:
                continue
            g = p.main_grad.detach().float().clone()
            dim = getattr(p, "tp_dim", None)
            if dim is not None and group_size(st.tp_group) > 1:
                parts = [torch.empty_like(g) for _ in range(st.tp_size)]
                dist.all_gather(parts, g.contiguous(), group=st.tp_group)
                g = torch.cat(parts, dim=dim)
            out[name] = g
    return out


def lora_run(rank: int, world: int, tree: dict, grad_step: int = 2) -> dict:
    """Losses of every step, the trainable/frozen split, and the gathered adapter gradients of step
    ``grad_step`` (step 1's A-gradients are zero: B starts at zero)."""
    trainer = make_trainer(tree, world)
    box, calls = {}, {"n": 0}
    orig = trainer.optimizer.apply

    def apply(lr, loss_scale=1.0, grad_scale=1.0):
        calls["n"] += 1
        if calls["n"] == grad_step:
            box["grads"] = {k: v * (grad_scale / loss_scale) for k, v in adapter_grads(trainer).items()}
        return orig(lr, loss_scale, grad_scale)
    trainer.optimizer.apply = apply
    history = trainer.run()
    frozen = sorted(n for c in trainer.chunks for n, p in c.named_parameters() if not p.requires_grad)
    return {"losses": [h.loss for h in history], "grads": box.get("grads"), "lora": trainer.lora,
            "frozen": frozen, "norms": [h.grad_norm for h in history]}
