"""Per-rank functions of the --fsdp tests (importable by spawned ranks)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from mwb.core import checkpoint
from mwb.core.models.init import is_output_head
from mwb.core.parallel.collectives import group_size
from mwb.core.parallel.fsdp import gather
from tests.helpers.workers import capture_first_grads, make_trainer

BASE = {
    "model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "dropout": 0.0,
              "max_position_embeddings": 32, "vocab_size": 200},
    "train": {"steps": 4, "micro_batch_size": 1, "global_batch_size": 4, "seq_length": 16, "seed": 3},
    "optim": {"lr": 3e-3, "weight_decay": 0.1, "clip_grad": 1.0, "lr_schedule": "constant"},
}


def tree(precision: str = "fp32", **parallel) -> dict:
    t = {k: dict(v) for k, v in BASE.items()}
    t["parallel"] = dict(parallel)
    t["train"]["precision"] = precision
    return t


def _capture_fsdp_grads(trainer) -> dict:
    """The first step's reduced gradients, gathered whole (DP, then TP), scaled as the optimizer scales."""
    opt, st, box = trainer.optimizer, trainer.state, {}
    orig_step, orig_norm = opt.step, opt._grad_norm_sq

    def step(lr, loss_scale=1.0, grad_scale=1.0):
        box["factor"] = grad_scale / loss_scale
        return orig_step(lr, loss_scale, grad_scale)

    def norm():
        if "grads" not in box:
            out = {}
            for name, p in opt.named:
                if is_output_head(name) and trainer.cfg.model.tie_embeddings:
                    continue
                g = gather(p.grad).float() * box["factor"]
                dim = getattr(p, "tp_dim", None)
                if dim is not None and group_size(st.tp_group) > 1:
                    parts = [torch.empty_like(g) for _ in range(st.tp_size)]
                    dist.all_gather(parts, g.contiguous(), group=st.tp_group)
                    g = torch.cat(parts, dim=dim)
                if name.endswith("word.weight") or is_output_head(name):
                    g = g[:trainer.spec.vocab_size]
                out[name] = g.clone()
            box["grads"] = out
        return orig_norm()
    opt.step, opt._grad_norm_sq = step, norm
    return box


def run(rank: int, world: int, t: dict) -> dict:
    """Losses and norms of every step, and the first step's whole gradients."""
    trainer = make_trainer(t, world)
    box = _capture_fsdp_grads(trainer) if trainer.cfg.parallel.fsdp else capture_first_grads(trainer)
    history = trainer.run()
    return {"losses": [h.loss for h in history], "norms": [h.grad_norm for h in history],
            "grads": box.get("grads"), "sharded": _sharded_fraction(trainer)}


def _sharded_fraction(trainer) -> float:
    """Elements this rank holds / elements of its (TP-local) model: 1/dp under FSDP."""
    held = whole = 0
    for p in trainer.chunks[0].parameters():
        held += (p.to_local() if hasattr(p, "to_local") else p).numel()
        whole += p.numel()
    return held / whole


def save_after(rank: int, world: int, t: dict, root: str, steps: int = 2) -> dict:
    """Train ``steps`` steps, save, then go on to the end: the checkpoint and the losses after it."""
    trainer = make_trainer(t, world)
    for _ in range(steps):
        trainer.train_step()
    path = checkpoint.save(trainer, root)
    return {"path": path, "after": [trainer.train_step().loss for _ in range(t["train"]["steps"] - steps)]}


def load_and_continue(rank: int, world: int, t: dict, path: str) -> dict:
    trainer = make_trainer(t, world)
    step = checkpoint.load(trainer, path)
    return {"step": step, "after": [trainer.train_step().loss for _ in range(t["train"]["steps"] - step)]}
