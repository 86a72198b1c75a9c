"""``mwb finetune e2e-qa``: joint retriever + reader training on the shared training job skeleton.

The launching process resolves everything once (:func:`plan_run`: tokenizer, evidence, the fixed
train / held-out question split, initial retriever weights, reader kind), then every rank runs
:func:`rank_main` through :func:`~mwb.core.training.job.run_job` (this process, ``torchrun`` or ``--nproc N``).
With ``--indexer-ranks R`` the last R ranks become indexers (:mod:`.refresh`) and only the others train.

Per rank: a :class:`~mwb.core.training.trainer.Trainer` over :class:`~.joint.JointSpec`, the retriever
initialised from the ``--retriever`` weights, version 0 of the index embedded before the first step, and a
refresh after every step that is a multiple of ``--refresh-every``. Checkpoints are the trainer's (so
``--resume`` works in any layout); the final and best ones also hold ``retriever/`` (a bi-encoder
checkpoint any retrieval command opens) and ``reader/`` (the reader's own format) for ``mwb eval qa``.
"""
from __future__ import annotations

import sys
from typing import Callable, Optional

import torch

from mwb.core.training.trainer import Trainer

from .joint import JointSpec, QuestionSet
from .refresh import AsyncRefresh, RefreshConfig, SyncRefresh


def joint_trainer(cfg, rcfg, method: str, top_k: int, make_reader: Callable, train_questions: list[dict],
                  evidence, tok, world: int, device="cpu") -> Trainer:
    """A trainer over the joint spec (``trainer.spec``), its training data the question set."""
    spec = JointSpec(cfg, cfg.model.vocab_size, rcfg, method, top_k, make_reader, train_questions, evidence, tok)
    data = QuestionSet(train_questions, tok, rcfg.query_length, cfg.train.seed)
    return Trainer(cfg, spec, data, world_size=world, device=device)


def initialise_retriever(trainer: Trainer, source) -> list[str]:
    """Copy a bi-encoder / BERT source into the (possibly TP-sharded) retriever; refresh fp32 masters."""
    from ..loading import fill_biencoder

    kept = fill_biencoder(trainer.model.retriever, source)
    with torch.no_grad():
        for pc in trainer.optimizer.pieces:
            if not pc.alias:
                pc.master.copy_(pc.param.data.view(-1)[pc.lo:pc.hi].float())
    return kept


def make_refresh(cfg: RefreshConfig, trainer: Trainer, tok, evidence, roles=None):
    if roles is None:
        return SyncRefresh(cfg, tok, evidence, trainer.spec.rcfg, trainer.state, trainer.device)
    return AsyncRefresh(cfg, roles, trainer.state, len(evidence), trainer.model.retriever.dim,
                        trainer.cfg.train.steps)


def run_joint(trainer: Trainer, refresh, callback: Optional[Callable] = None):
    """Index version 0 from the current weights, train with a refresh after each step, close the refresh.
    Returns the trainer's step history."""
    spec = trainer.spec
    spec.index = refresh.start(trainer.model.retriever, trainer.step)

    def after(tr, res, stop):
        new = refresh.after_step(tr.model.retriever, res.step)
        if new is not None:
            spec.index = new
        if callback is not None:
            callback(tr, res, stop)
    try:
        return trainer.run(after)
    finally:
        refresh.close()


def say_rank0(rank: int):
    return (lambda *a, **k: print(*a, **{"file": sys.stderr, **k})) if rank == 0 else (lambda *a, **k: None)
