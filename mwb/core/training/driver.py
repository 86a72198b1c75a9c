"""The per-rank training driver: what every trainer-driven command does around the part that differs.

``mwb pretrain``, the bi-encoder commands (``pretrain ict|mss``, ``finetune dpr``), joint retriever + reader
training (``finetune e2e-qa``), ``mwb finetune TASK`` and SGEAT's domain-adaptive training each *build*
something different (datasets, a model spec, a step hook such as fine-tuning's per-epoch evaluation) and
report different results. What they share is written here once, so a change to it (how a rank starts, how a
resume is announced, how a stop signal is handled, what the closing lines say) reaches all of them:

- :func:`start_rank`: the config tree back into a :class:`~mwb.core.config.RunConfig`, distributed init, and a
  ``say`` that prints on rank 0 only;
- :func:`resume_latest`: load ``OUT/checkpoints/latest`` when ``--resume`` asks, and say so;
- :class:`StepHook`: what a trainer calls after every step (log, evaluate, checkpoint); a plain function of
  the same arguments is one too;
- :func:`train`: signal handlers (SIGTERM / Ctrl-C save a checkpoint through the step hook), the run, its time;
- :func:`banner`: the closing ``mwb: run directory / metrics / checkpoint ...`` lines, one format;
- :func:`launch_training`: the launching side: the layout check, the run's config tree with ``train.out``,
  and :func:`~.job.run_job`.

Run logging itself (``config.yaml``, ``metrics.jsonl``, TensorBoard, energy) is :func:`~.run_dir.open_run`.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable, Optional

from ..config import RunConfig, update


def silent(*args, **kwargs) -> None:
    """The ``say`` of every rank but rank 0."""


@dataclasses.dataclass(frozen=True)
class RankStart:
    """One rank's config and place in the job; ``say`` prints on rank 0 only (``print``'s arguments)."""
    cfg: RunConfig
    rank: int
    world: int
    device: object
    say: Callable


def start_rank(tree: dict) -> RankStart:
    """The rank's config (the launching process's tree over the defaults) and distributed init."""
    from .launch import init_distributed  # imports torch.distributed: only ranks need it

    cfg = update(RunConfig(), tree)
    rank, world, device = init_distributed(cfg.parallel.timeout_s)
    return RankStart(cfg, rank, world, device, print if rank == 0 else silent)


def resume_latest(trainer, ckpt_root: str, resume: bool, say: Callable, announce_missing: bool = False,
                  file=None) -> tuple[int, Optional[str]]:
    """(start step, checkpoint directory loaded or None). With ``resume``, the newest complete checkpoint under
    ``ckpt_root`` is loaded into ``trainer`` and announced on ``file`` (stderr unless given); without one,
    ``announce_missing`` says the run starts from step 0."""
    from .. import checkpoint

    out = sys.stderr if file is None else file
    latest = checkpoint.latest_dir(ckpt_root) if resume else None
    if latest is None:
        if resume and announce_missing:
            say(f"mwb: no checkpoint under {ckpt_root}; starting from step 0", file=out)
        return 0, None
    start = checkpoint.load(trainer, latest)
    say(f"mwb: resumed from {latest} (step {start})", file=out)
    return start, latest


class StepHook:
    """Called as ``hook(trainer, result, stop)`` after every optimizer step (``result``: the step's
    :class:`~.trainer.StepResult`; ``stop``: a stop signal arrived, so checkpoint now). The per-command part
    of a training loop lives in one: fine-tuning's per-epoch evaluation and best checkpoint
    (:class:`mwb.tasks.api.epoch_evaluation.EpochEvaluation`), pretraining's interval actions."""

    def __call__(self, trainer, result, stop: bool) -> None:
        raise NotImplementedError


def train(trainer, after_step: Callable) -> tuple[list, float]:
    """Install the stop-signal handlers, run ``trainer`` with ``after_step(trainer, result, stop)`` (a
    :class:`StepHook` or a function of those arguments; it checkpoints when ``stop``), and return (the step
    history, seconds it took)."""
    trainer.install_signal_handlers()
    t0 = time.time()
    history = trainer.run(after_step)
    return history, time.time() - t0


def banner(say: Callable, out: str, rows: tuple = ()) -> None:
    """The closing lines: the run directory and its ``metrics.jsonl``, then ``rows`` — (label, value) pairs,
    a None value left out — in the same two columns."""
    for label, value in (("run directory", os.path.abspath(out)), ("metrics", os.path.join(out, "metrics.jsonl")),
                         *rows):
        if value is not None:
            say(f"mwb: {label:<16}{value}")


def run_tree(cfg: RunConfig, out: str) -> dict:
    """The config tree every rank rebuilds its config from, with ``train.out`` set to the run directory."""
    return dataclasses.asdict(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, out=out)))


def no_pipeline(dims, what: str) -> None:
    """A usage error when the layout asks for pipeline stages that ``what`` does not support."""
    if dims.pp > 1:
        from ..parallel.dims import LayoutError
        raise LayoutError(f"{what} does not support pipeline parallelism; use --pp 1")


def launch_training(cfg: RunConfig, out: str, nproc: Optional[int], rank_main: Callable, plan: Callable,
                    resume: bool, no_pp: Optional[str] = None) -> None:
    """Run ``rank_main(tree, plan(), out, resume)`` on this process, under torchrun, or on ``nproc`` spawned
    ranks (:func:`~.job.run_job`: layout and ``--resume`` checkpoint checked first). ``plan`` runs once, in
    the launching process, after those checks; ``no_pp`` names the training that refuses ``--pp`` > 1."""
    from .job import run_job

    def prepare(dims):
        if no_pp:
            no_pipeline(dims, no_pp)
        return run_tree(cfg, out), plan(), out, resume

    run_job(cfg, nproc, rank_main, prepare, resume=os.path.join(out, "checkpoints") if resume else None)
