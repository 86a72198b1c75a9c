"""Per-rank functions for the checkpoint tests (importable by spawned ranks).

A "probe" after loading measures what must survive resharding: full logits on a fixed batch (gathered over
TP; pipeline layouts report the forward-only loss of that batch instead) and the loss of the next training
step, which depends on the weights, the optimizer state (moments and master weights), the LR schedule
position and the data position.
"""
from __future__ import annotations

import importlib.util

import torch
import torch.distributed as dist

from mwb.core import checkpoint
from mwb.core.parallel.collectives import group_size
from mwb.core.training.batches import SyntheticTokens, get_microbatches
from tests.helpers.workers import VOCAB, make_trainer

BASE = {
    "model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "dropout": 0.0,
              "max_position_embeddings": 32, "vocab_size": 200},
    "train": {"steps": 6, "micro_batch_size": 1, "global_batch_size": 4, "seq_length": 16, "seed": 3},
    "optim": {"lr": 1e-2, "warmup_steps": 1},
}


def tree(**parallel) -> dict:
    t = {k: dict(v) for k, v in BASE.items()}
    t["parallel"] = dict(parallel)
    return t


def have_pipeline() -> bool:
    return importlib.util.find_spec("mwb.core.pipeline.schedules") is not None


SAVE_LAYOUT = {"tp": 2, "pp": 2} if have_pipeline() else {"tp": 2, "distributed_optimizer": True}


FIXED = SyntheticTokens(VOCAB, 16, seed=99)


def _fixed_batch(trainer) -> list[dict]:
    t = trainer.cfg.train
    return get_microbatches(FIXED, 0, t.global_batch_size, t.micro_batch_size, trainer.dims.dp,
                            trainer.state.dp_rank)


@torch.no_grad()
def probe_logits(trainer):
    """Full-vocabulary logits of the first fixed micro-batch (None with pipeline parallelism)."""
    if len(trainer.chunks) != 1 or trainer.dims.pp != 1:
        return None
    model = trainer.chunks[0]
    model.eval()
    tokens = get_microbatches(FIXED, 0, 2, 2, 1, 0)[0]["tokens"][:, :-1]
    logits = model(tokens=tokens).float()
    tp = trainer.state.tp_group
    if group_size(tp) > 1:
        parts = [torch.empty_like(logits) for _ in range(trainer.dims.tp)]
        dist.all_gather(parts, logits.contiguous(), group=tp)
        logits = torch.cat(parts, dim=-1)
    model.train()
    return logits[..., :VOCAB].clone()


@torch.no_grad()
def probe_loss(trainer) -> float:
    """Forward-only mean loss of the fixed global batch (works for every layout, pipelines included)."""
    trainer._set_train(False)
    t = trainer.cfg.train
    ls, n = trainer.schedule(trainer.chunks, _fixed_batch(trainer), trainer.spec, trainer.state, 1.0,
                             forward_only=True, seq_length=t.seq_length, micro_batch_size=t.micro_batch_size)
    total, tokens = trainer._global_loss(ls, n)
    trainer._set_train(True)
    return total / tokens


def probe(trainer) -> dict:
    out = {"logits": probe_logits(trainer), "fixed_loss": probe_loss(trainer)}
    out["next"] = [trainer.train_step().loss for _ in range(2)]
    return out


def save_then_continue(rank: int, world: int, tree: dict, root: str, steps_before: int = 2) -> dict:
    """Train, save, probe; then reload the checkpoint into a fresh trainer of the same layout and probe
    again (same-layout resume must be bit-identical)."""
    trainer = make_trainer(tree, world)
    for _ in range(steps_before):
        trainer.train_step()
    path = checkpoint.save(trainer, root, keep_last=tree.get("_keep_last", 0))
    first = probe(trainer)
    again = make_trainer(tree, world)
    step = checkpoint.load(again, path)
    second = probe(again)
    return {"path": path, "step": step, "first": first, "second": second}


def load_then_continue(rank: int, world: int, tree: dict, path: str) -> dict:
    trainer = make_trainer(tree, world)
    step = checkpoint.load(trainer, path)
    return {"step": step, **probe(trainer)}
