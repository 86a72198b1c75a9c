"""Per-rank functions for the MoE equivalence tests (importable by spawned ranks).

One spawned group runs several configurations in turn (spawning is the expensive part on 2 cores); each
returns per-step losses and aux losses, the reduced step-1 gradients gathered to full shapes (experts over
EP too) and the routed expert indices of step 1 in global micro-batch order.
"""
from __future__ import annotations

import torch

from mwb.core.models.moe import MoELayer
from tests.helpers.workers import capture_first_grads, make_trainer


def _moe_layers(trainer):
    # Layer names carry global layer ids, so they are unique across pipeline stages and chunks.
    return {name: m for chunk in trainer.chunks for name, m in chunk.named_modules() if isinstance(m, MoELayer)}


def train_moe(rank: int, world: int, tree: dict) -> dict:
    trainer = make_trainer(tree, world)
    layers = _moe_layers(trainer)
    for m in layers.values():
        m.routing_log = []
    first = capture_first_grads(trainer)
    routing, dropped = {}, []

    def after_step(tr, res, stop):
        if res.step == 1:
            for name, m in layers.items():
                routing[name], m.routing_log = m.routing_log, None
                dropped.append(m.last_dropped)
    history = trainer.run(after_step)
    st = trainer.state
    return {"losses": [h.loss for h in history], "aux": [h.extra.get("moe_aux_loss") for h in history],
            "z": [h.extra.get("moe_z_loss") for h in history], "grads": first.get("grads"), "routing": routing,
            "dropped": sum(dropped),
            "dp_rank": st.dp_rank, "tp_rank": st.tp_rank}


def train_many(rank: int, world: int, trees: list) -> list:
    return [train_moe(rank, world, tree) for tree in trees]


def global_routing(results: list) -> dict:
    """Step-1 routing per layer, micro-batches in global order (TP rank 0 of each data-parallel rank of
    the pipeline stage that holds the layer)."""
    ranks = sorted((r for r in results if r["tp_rank"] == 0), key=lambda r: r["dp_rank"])
    names = sorted({n for r in ranks for n in r["routing"]})
    return {n: torch.cat([torch.cat(r["routing"][n]) for r in ranks if n in r["routing"]]) for n in names}

