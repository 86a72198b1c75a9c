"""What a training command does after every step: log it, evaluate and checkpoint on schedule, stop cleanly.

One callback for :meth:`Trainer.run` shared by ``mwb pretrain`` and the bi-encoder commands, so the eval
and save schedule (every ``eval_interval`` / ``save_interval`` steps, and at the last step) and the
signal handling (checkpoint, then say how to resume) are written once. Fine-tuning evaluates per epoch and
keeps the best checkpoint, so it has its own.
"""
from __future__ import annotations

import sys
from typing import Callable, Optional

from .. import checkpoint


class StepActions:
    """``callback(trainer, result, stop)``; :attr:`saved` is the newest checkpoint directory (or the one a
    run resumed from, until it writes its own)."""

    def __init__(self, logger, ckpt_root: str, train_cfg, extra_files: Optional[dict] = None,
                 say: Callable = print, saved: Optional[str] = None) -> None:
        self.logger, self.ckpt_root, self.t = logger, ckpt_root, train_cfg
        self.extra_files, self.say, self.saved = extra_files, say, saved

    def __call__(self, trainer, res, stop: bool) -> None:
        t = self.t
        self.logger.log_step(res)
        if trainer.valid_data is not None and ((t.eval_interval and res.step % t.eval_interval == 0)
                                               or res.step == t.steps):
            loss = trainer.evaluate()
            self.logger.log_valid(res.step, loss, trainer.eval_metrics)
        if stop or res.step == t.steps or (t.save_interval and res.step % t.save_interval == 0):
            self.saved = checkpoint.save(trainer, self.ckpt_root, keep_last=t.keep_last,
                                         extra_files=self.extra_files)
        if stop:
            self.say(f"\nmwb: stopped by signal after step {res.step}; checkpoint saved, continue with --resume",
                     file=sys.stderr)
