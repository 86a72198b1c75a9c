"""One skeleton for every trainer-driven command: prepare, launch the ranks, run each rank's main, report.

``mwb pretrain``, ``mwb finetune`` and the bi-encoder commands differ in what they prepare and in what a rank
does, not in how a job starts. :func:`run_job` owns the part they share:

1. in the launching process, before any rank exists: the parallel layout is checked against the world size
   (a bad one is a usage error naming the numbers), the checkpoint ``--resume`` would load is checked
   complete (``checkpoints/latest`` names an existing step whose metadata and shards are all there), and the
   command's ``prepare`` resolves data, tokenizer and initial weights once, so ranks only read finished files;
2. the ranks: this process alone (``--nproc 1``), this process as one rank of a ``torchrun`` job, or
   ``--nproc N`` ranks through torch's elastic launcher (:func:`~.launch.launch`);
3. each rank runs ``rank_main(*args)`` (a module-level function, since spawned ranks import it), which
   trains and reports on rank 0;
4. an error in a rank reaches the launching process as one :class:`~mwb.core.errors.RankError`, which the CLI
   prints as one line naming the rank.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from ..checkpoint import resume_dir
from ..config import RunConfig
from ..parallel.dims import ParallelDims
from .launch import launch, under_launcher
from .trainer import parallel_dims


def world_size(nproc: Optional[int]) -> int:
    """The job's number of ranks: torchrun's WORLD_SIZE when running under it, else ``--nproc`` (default 1)."""
    return int(os.environ["WORLD_SIZE"]) if under_launcher() else (nproc or 1)


def first_process() -> bool:
    """True in the one process that should speak while preparing (not a non-zero torchrun rank)."""
    return not under_launcher() or int(os.environ.get("RANK", 0)) == 0


def run_job(cfg: RunConfig, nproc: Optional[int], rank_main: Callable[..., None],
            prepare: Callable[[ParallelDims], tuple], resume: Optional[str] = None) -> None:
    """Check and prepare in this process, then run ``rank_main(*prepare(dims))`` on every rank.

    ``resume``: the ``OUT/checkpoints`` directory a ``--resume`` run will load from (None when not
    resuming); it is validated here so a broken checkpoint fails once, before launching, not on every rank.
    """
    dims = parallel_dims(cfg, world_size(nproc))
    if resume is not None:
        resume_dir(resume)
    args = prepare(dims)
    if under_launcher() or dims.world_size == 1:
        rank_main(*args)
    else:
        launch(rank_main, dims.world_size, *args)
