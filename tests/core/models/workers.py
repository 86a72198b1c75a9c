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
    m = dict(MODEL, **(T5_MODEL if arch == "t5" else {"arch": arch}), **model)
    return {"model": m, "train": dict(TRAIN), "parallel": dict(parallel or {}),
            "optim": {"lr": 3e-3, "warmup_steps": 1}}


def losses(t: dict, world: int) -> list[float]:
    cfg = update(RunConfig(), t)
    if cfg.model.arch == "t5":
        data = SyntheticT5(VOCAB, SEQ, dec_length=SEQ // 2, seed=11)
    else:
        data = SyntheticBert(VOCAB, SEQ, seed=11)
    trainer = Trainer(cfg, spec_for(cfg.model.arch)(cfg, VOCAB), data, world_size=world)
    return [r.loss for r in trainer.run()]


def many_losses(rank: int, world: int, trees: list[dict]) -> list[list[float]]:
    """Run several trainings in one spawned group (starting ranks costs more than these tiny runs)."""
    return [losses(t, world) for t in trees]
