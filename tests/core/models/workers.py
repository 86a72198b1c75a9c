"""Per-rank training functions for the BERT/T5 equivalence tests (importable by spawned ranks)."""
from __future__ import annotations

from mwb.core.config import RunConfig, update
from mwb.core.training.trainer import Trainer
from mwb.pretraining import spec_for
from mwb.pretraining.synthetic import SyntheticBert, SyntheticT5

VOCAB = 120
SEQ = 16

MODEL = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "dropout": 0.0,
         "max_position_embeddings": 32}
TRAIN = {"steps": 5, "micro_batch_size": 2, "global_batch_size": 4, "seq_length": SEQ, "seed": 5}
T5_MODEL = {"arch": "t5", "num_decoder_layers": 2, "position_embedding": "relative", "bias": False,
            "normalization": "rmsnorm", "relative_attention_num_buckets": 8,
            "relative_attention_max_distance": 16}


def tree(arch: str, parallel: dict | None = None, **model) -> dict:
    m = {**MODEL, **(T5_MODEL if arch == "t5" else {"arch": arch}), **model}
    return {"model": m, "train": dict(TRAIN), "parallel": dict(parallel or {}),
            "optim": {"lr": 3e-3, "warmup_steps": 1}}


def make_trainer(t: dict, world: int) -> Trainer:
    cfg = update(RunConfig(), t)
    if cfg.model.arch == "t5":
        data = SyntheticT5(VOCAB, SEQ, dec_length=SEQ // 2, seed=11)
    else:
        data = SyntheticBert(VOCAB, SEQ, seed=11)
    return Trainer(cfg, spec_for(cfg.model.arch)(cfg, VOCAB), data, world_size=world)


def losses(t: dict, world: int) -> list[float]:
    """Per-step losses; for BERT each step is ``(loss, lm_loss, sop_loss)`` so the reported parts are
    compared across layouts too."""
    out = []
    for r in make_trainer(t, world).run():
        out.append((r.loss, r.extra["lm_loss"], r.extra["sop_loss"]) if "lm_loss" in r.extra else r.loss)
    return out


def many_losses(rank: int, world: int, trees: list[dict]) -> list[list[float]]:
    """Run several trainings in one spawned group (starting ranks costs more than these tiny runs)."""
    return [losses(t, world) for t in trees]


def stage_copies_equal(trainer) -> bool:
    """Every copy of a parameter that several pipeline stages hold (T5's bias tables) is bitwise equal to
    the others, on this rank and across the holding ranks."""
    import torch
    import torch.distributed as dist
    ok = True
    for copies in trainer.optimizer.stage_copies:
        first = copies.params[0].detach()
        ok &= all(torch.equal(first, p.detach()) for p in copies.params[1:])
        if copies.group is not None:
            theirs = [torch.empty_like(first) for _ in range(dist.get_world_size(copies.group))]
            dist.all_gather(theirs, first.contiguous(), group=copies.group)
            ok &= all(torch.equal(first, t) for t in theirs)
    return bool(ok)


def report(t: dict, world: int) -> dict:
    """Losses, step-1 gradients (``tests.helpers.workers.report_run``) and whether stage copies stayed equal."""
    from tests.helpers.workers import report_run
    trainer = make_trainer(t, world)
    out = report_run(trainer)
    out["copies"] = sum(len(c.params) for c in trainer.optimizer.stage_copies)
    out["copies_equal"] = stage_copies_equal(trainer)
    return out


def many_reports(rank: int, world: int, trees: list[dict]) -> list[dict]:
    """:func:`report` for several trainings in one spawned group."""
    return [report(t, world) for t in trees]


# ------------------------------------------------------------------------------------------ checkpoints
FIXED_T5 = SyntheticT5(VOCAB, SEQ, dec_length=SEQ // 2, seed=99)


def fixed_loss(trainer) -> float:
    """Forward-only mean loss of one fixed global batch (any layout)."""
    trainer.valid_data = FIXED_T5
    return trainer.evaluate(1)


def probe(trainer) -> dict:
    return {"fixed": fixed_loss(trainer), "next": [trainer.train_step().loss for _ in range(2)]}


def save_then_reshard(rank: int, world: int, t: dict, root: str, other: dict) -> dict:
    """Train 2 steps in layout ``t``, save, probe; then load the checkpoint into layout ``other`` (same
    world size) and probe it too."""
    from mwb.core import checkpoint
    trainer = make_trainer(t, world)
    for _ in range(2):
        trainer.train_step()
    path = checkpoint.save(trainer, root)
    first = probe(trainer)
    again = make_trainer(other, world)
    step = checkpoint.load(again, path)
    return {"path": path, "first": first, "other": {"step": step, **probe(again)}}


def load_then_probe(rank: int, world: int, t: dict, path: str) -> dict:
    from mwb.core import checkpoint
    trainer = make_trainer(t, world)
    step = checkpoint.load(trainer, path)
    return {"step": step, **probe(trainer)}
