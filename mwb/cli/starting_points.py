"""Where a fine-tuning run starts when no ``--checkpoint`` is given, shared by every command that needs it.

Why a module of its own: ``mwb finetune TASK``, the multi-part pipelines (``mwb finetune story``, ...) and
``mwb eval`` all look for "the newest run of X, else a short one trained now"; keeping that rule here lets
those command modules import it without importing each other.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import click

from .options import default_out

PRETRAIN_FOR = {"bert": "pretrain-bert", "gpt": "pretrain-gpt", "t5": "pretrain-t5"}
FINETUNE_DEFAULTS = {
    "train": {"steps": 1, "micro_batch_size": 4, "global_batch_size": 16, "eval_interval": 0, "save_interval": 0,
              "rampup_batch_size": None},  # a pretraining run's batch ramp-up is not the fine-tune's
    "optim": {"lr": 1e-4, "warmup_steps": 0, "decay_steps": None, "lr_schedule": "linear", "min_lr": 0.0,
              "weight_decay": 0.01},
}


def latest_run(prefix: str):
    """The newest complete run ``runs/PREFIX-<YYYYmmdd-HHMMSS>`` (not ``runs/PREFIX-pubmed-...``)."""
    pattern = re.compile(re.escape(prefix) + r"-\d{8}-\d{6}$")
    runs = [r for r in glob.glob(os.path.join("runs", f"{prefix}-*")) if pattern.match(os.path.basename(r))]
    for run in sorted(runs, key=os.path.getmtime, reverse=True):
        if os.path.isfile(os.path.join(run, "checkpoints", "latest")):
            return run
    return None


def default_checkpoint(arch: str, say, data=None, steps: int = 300) -> str:
    """The newest ``mwb pretrain ARCH`` run (on named data ``data``, e.g. ``pubmed``, when the task asks for
    it), or a short one trained now (said out loud)."""
    prefix = PRETRAIN_FOR[arch] + (f"-{data}" if data else "")
    corpus = f"named data '{data}'" if data else "the bundled corpus"
    run = latest_run(prefix)
    if run:
        say(f"mwb: no --checkpoint given: fine-tuning the newest {arch.upper()} pretraining run on {corpus}: {run}")
        return run
    out = default_out(prefix)
    say(f"mwb: no --checkpoint given and no {prefix} run under runs/: pretraining a tiny {arch.upper()} first "
        f"({out}, {steps} steps on {corpus})")
    cmd = [sys.executable, "-m", "mwb", "pretrain", arch, "--steps", str(steps), "--eval-interval", "0", "--out", out]
    if data:
        cmd += ["--data", data]
    if subprocess.call(cmd) != 0:
        raise click.ClickException(f"the {arch.upper()} pretraining run failed; pass --checkpoint DIR")
    return out
