"""Fine-tuning's step hook (:class:`~mwb.core.training.driver.StepHook`): the dev split evaluated at every
epoch's end, a checkpoint saved there, the best one kept.

The training driver runs the loop; this object is the one thing ``mwb finetune`` adds to it. It owns the run's
epoch history and its best checkpoint, so a run resumed from a checkpoint continues both from
``OUT/metrics.jsonl`` (the epochs evaluated before the stop) and ``OUT/checkpoints/best`` is rewritten where
a kill fell between a checkpoint and that file. ``--keep-last K`` prunes all but the newest K epoch
checkpoints and the best one. Encoder tasks score their dev records here (the best epoch's are written to
``predictions.jsonl`` before its checkpoint, so a resumed run keeps them); generative tasks only their dev
loss (their generations are scored after training).
"""
from __future__ import annotations

import json
import os
from typing import Optional

from mwb.core import checkpoint
from mwb.core.atomic import atomic_write_text
from mwb.core.training.driver import StepHook
from mwb.evaluation.predictions import write_predictions

LOWER_IS_BETTER = ("loss", "ppl")  # metric names ending so are minimised


def better(metric: str, value: float, best: Optional[float]) -> bool:
    """Whether ``value`` of ``metric`` beats ``best`` (None: nothing yet, so it does)."""
    if best is None:
        return True
    return value < best if metric.endswith(LOWER_IS_BETTER) else value > best


def logged_epochs(out: str, start: int) -> list[dict]:
    """The per-epoch dev records (``{"step": N, **metrics}``) that ``OUT/metrics.jsonl`` holds up to step
    ``start``: what a run resumed there had evaluated before it was stopped."""
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by the kill
                continue
            if rec.get("split") == "valid" and rec.get("step", 0) <= start:
                rows.append({k: v for k, v in rec.items() if k != "split"})
    return rows


class EpochEvaluation(StepHook):
    """After each step: log it; at an epoch's end (and the last step) evaluate, checkpoint, track the best;
    otherwise checkpoint on a stop signal or every ``--save-interval`` steps.

    ``evaluate(trainer)`` is the objective's epoch scoring, ``(metrics, dev records or None)``; ``logger`` the
    run's :func:`~mwb.core.training.run_dir.open_run`; ``tokenizer`` travels with every checkpoint."""

    def __init__(self, cfg, out: str, rank: int, metric: str, steps_per_epoch: int, evaluate, logger,
                 tokenizer: str, start: int) -> None:
        self.cfg, self.out, self.rank, self.metric = cfg, out, rank, metric
        self.steps_per_epoch, self.evaluate, self.logger, self.tokenizer = steps_per_epoch, evaluate, logger, tokenizer
        self.ckpt_root = os.path.join(out, "checkpoints")
        self.history: list[dict] = []
        self.best: dict = {"value": None, "step": None}
        if start and rank == 0:  # a resumed run continues the epochs and the best checkpoint it had
            self._continue(start)

    def _continue(self, start: int) -> None:
        for rec in logged_epochs(self.out, start):
            self.history.append(rec)
            if better(self.metric, rec[self.metric], self.best["value"]):
                self.best.update(value=rec[self.metric], step=rec["step"],
                                 path=os.path.join(self.ckpt_root, f"step_{rec['step']}"),
                                 metrics={k: v for k, v in rec.items() if k != "step"})
        if self.best["step"] is not None:  # the kill may have come between a checkpoint and this file
            atomic_write_text(os.path.join(self.ckpt_root, "best"), f"step_{self.best['step']}\n")

    def _save(self, trainer, **kw) -> str:
        return checkpoint.save(trainer, self.ckpt_root, extra_files={"tokenizer": self.tokenizer}, **kw)

    def __call__(self, trainer, result, stop: bool) -> None:
        self.logger.log_step(result)
        train = self.cfg.train
        if result.step % self.steps_per_epoch == 0 or result.step == train.steps:
            self._end_of_epoch(trainer, result.step)
        elif stop or (train.save_interval and result.step % train.save_interval == 0):
            self._save(trainer)

    def _end_of_epoch(self, trainer, step: int) -> None:
        metrics, records = self.evaluate(trainer)
        metrics = {**metrics, "epoch": -(-step // self.steps_per_epoch)}
        self.logger.log_eval(step, metrics)
        self.history.append({"step": step, **metrics})
        improved = better(self.metric, metrics[self.metric], self.best["value"])
        if improved and self.rank == 0 and records is not None:  # before the checkpoint: a resumed run keeps them
            write_predictions(self.out, records)
        path = self._save(trainer, keep_last=0)
        if improved:
            self.best.update(value=metrics[self.metric], step=step, path=path, metrics=metrics)
            if self.rank == 0:
                atomic_write_text(os.path.join(self.ckpt_root, "best"), f"step_{step}\n")
        if self.rank == 0 and self.cfg.train.keep_last > 0:  # --keep-last K: the newest K and the best survive
            checkpoint.prune(self.ckpt_root, self.cfg.train.keep_last, keep=[f"step_{self.best['step']}"])
