"""Per-rank functions for the pipeline tests (importable by spawned ranks)."""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from mwb.core.pipeline.p2p import PipelineCommError
from tests.helpers.workers import make_trainer, train_and_report


def tied_copies_equal(trainer) -> bool:
    """First-stage ``embed.word.weight`` and last-stage ``head.weight`` are bitwise equal (embedding group)."""
    st = trainer.state
    group = st.group("embedding")
    if group is None:
        return True
    mine = None
    for chunk in trainer.chunks:
        if getattr(chunk, "shares_embedding", False):
            mine = chunk.embed.word.weight if chunk.pre_process else chunk.head.weight
    if mine is None:
        return True
    theirs = [torch.empty_like(mine) for _ in range(2)]
    dist.all_gather(theirs, mine.detach().contiguous(), group=group)
    return bool(torch.equal(theirs[0], theirs[1]))


def report_with_tied_check(rank: int, world: int, tree: dict) -> dict:
    """``train_and_report`` plus: are the tied embedding copies equal before and after training?"""
    before = {}
    import tests.helpers.workers as w

    orig = w.make_trainer

    def make(tree_, world_):
        trainer = orig(tree_, world_)
        before["equal"] = tied_copies_equal(trainer)
        before["trainer"] = trainer
        return trainer
    w.make_trainer = make
    try:
        out = train_and_report(rank, world, tree)
    finally:
        w.make_trainer = orig
    out["tied_equal_init"] = before["equal"]
    out["tied_equal_end"] = tied_copies_equal(before["trainer"])
    return out


def die_mid_step(rank: int, world: int, tree: dict, victim: int, hang: bool = False) -> dict:
    """Train; rank ``victim`` kills itself (or, with ``hang``, stops responding) at its second forward of the
    first step. Survivors report their error and how long it took to arrive."""
    trainer = make_trainer(tree, world)
    calls = {"n": 0}
    if rank == victim:
        spec_forward = trainer.spec.forward

        def forward(model, batch, hidden=None):
            calls["n"] += 1
            if calls["n"] == 2:
                if hang:
                    time.sleep(3600)
                os.kill(os.getpid(), 9)
            return spec_forward(model, batch, hidden)
        trainer.spec.forward = forward
    t0 = time.monotonic()
    try:
        trainer.train_step()
    except PipelineCommError as e:
        return {"error": str(e), "seconds": time.monotonic() - t0, "type": "PipelineCommError"}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t0, "type": type(e).__name__}
    return {"error": None, "seconds": time.monotonic() - t0}
