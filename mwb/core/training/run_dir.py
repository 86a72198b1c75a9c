"""Run directories: where a run goes by default, which finished run is the newest, and opening one.

Why one module: every trainer (pretraining, fine-tuning, SGEAT's domain-adaptive training, DPR, joint
retriever + reader training) writes the same layout — ``OUT/config.yaml`` (the resolved config plus what the
run derived), ``OUT/metrics.jsonl`` and TensorBoard through :class:`~.metrics_log.MetricsLogger` — and every
command that starts from "the newest run of X" reads it back by the same name rule. Writing that once keeps
the layout the README documents the one every trainer produces.
"""
from __future__ import annotations

import datetime
import glob
import os
import re
from typing import Optional

from ..config import RunConfig, dump_yaml

RUNS = "runs"


def default_out(command: str, root: str = RUNS) -> str:
    """``runs/<command>-<YYYYmmdd-HHMMSS>``: a new run's directory when ``--out`` is not given."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, f"{command}-{stamp}")


def latest_run(prefix: str, root: str = RUNS) -> Optional[str]:
    """The newest complete run ``runs/PREFIX-<YYYYmmdd-HHMMSS>`` (one whose ``checkpoints/latest`` exists), by
    modification time; ``runs/PREFIX-pubmed-…`` is another prefix's run, not this one's."""
    pattern = re.compile(re.escape(prefix) + r"-\d{8}-\d{6}$")
    runs = [r for r in glob.glob(os.path.join(root, f"{prefix}-*")) if pattern.match(os.path.basename(r))]
    for run in sorted(runs, key=os.path.getmtime, reverse=True):
        if os.path.isfile(os.path.join(run, "checkpoints", "latest")):
            return run
    return None


def open_run(out: str, cfg: RunConfig, rank: int, world: int, start_step: int = 0, extra: Optional[dict] = None,
             flops_per_tok: Optional[float] = None):
    """Set up run directory ``out`` for a trainer: rank 0 creates it and writes ``config.yaml`` (``cfg`` plus the
    ``extra`` sections the run derived); every rank gets the metrics logger (enabled on rank 0 only), which
    resumes ``metrics.jsonl`` after ``start_step`` (a :class:`~.metrics_log.MetricsLogger`)."""
    from .metrics_log import MetricsLogger  # imports torch: the run-name helpers above are used without it
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        dump_yaml(cfg, os.path.join(out, "config.yaml"), extra=extra)
    return MetricsLogger(out, cfg.train.steps, enabled=rank == 0, tensorboard=cfg.logging.tensorboard,
                         progress=cfg.logging.progress, flops_per_tok=flops_per_tok,
                         peak_tflops=cfg.logging.peak_tflops if flops_per_tok is not None else None,
                         world_size=world, start_step=start_step, log_interval=cfg.logging.log_interval,
                         energy=cfg.energy, trackers=cfg.logging.log)
