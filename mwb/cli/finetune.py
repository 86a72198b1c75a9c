"""``mwb finetune TASK``: fine-tune a pretrained checkpoint on a task (RACE; more tasks register here)."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import click

from .options import build_config, default_out, training_options


def latest_run(prefix: str):
    runs = sorted(glob.glob(os.path.join("runs", f"{prefix}-*")), key=os.path.getmtime, reverse=True)
    for run in runs:
        if os.path.isfile(os.path.join(run, "checkpoints", "latest")):
            return run
    return None


def default_bert_checkpoint(say) -> str:
    """The newest `mwb pretrain bert` run, or a short one trained now (said out loud)."""
    run = latest_run("pretrain-bert")
    if run:
        say(f"mwb: no --checkpoint given: fine-tuning the newest BERT pretraining run {run}")
        return run
    out = default_out("pretrain-bert")
    say(f"mwb: no --checkpoint given and no BERT pretraining run under runs/: pretraining a tiny BERT first "
        f"({out}, 300 steps on the bundled corpus)")
    cmd = [sys.executable, "-m", "mwb", "pretrain", "bert", "--steps", "300", "--eval-interval", "0", "--out", out]
    if subprocess.call(cmd) != 0:
        raise click.ClickException("the BERT pretraining run failed; pass --checkpoint DIR")
    return out


def _task_command(name: str):
    @click.command(name=name, help=f"Fine-tune a BERT checkpoint on {name.upper()} and report dev metrics.\n\n"
                   "--checkpoint takes an mwb run/checkpoint or a Hugging Face BERT directory; with none, the "
                   "newest `mwb pretrain bert` run is used (a tiny one is trained first if there is none). "
                   "--data takes the task's official layout; with none, a bundled sample in that layout.")
    @training_options
    @click.option("--checkpoint", default=None, help="Pretrained checkpoint (mwb or Hugging Face BERT).")
    @click.option("--data", default=None, type=click.Path(), help="Task data directory or file.")
    @click.option("--epochs", type=int, default=3, show_default=True, help="Training epochs.")
    def cmd(checkpoint, data, epochs, **kw):
        from mwb.core.compose import full_state
        from mwb.tasks.base import get_finetune_task
        from mwb.tasks.finetune import finetune

        task = get_finetune_task(name)
        say = lambda m: click.echo(m, err=True)  # noqa: E731
        checkpoint = checkpoint or default_bert_checkpoint(say)
        data = data or task.default_data
        pre_cfg, _, _, tok_path = full_state(checkpoint)
        if pre_cfg.model.arch != "bert":
            raise click.UsageError(f"{checkpoint} holds a '{pre_cfg.model.arch}' model; {name} fine-tunes BERT")
        tokenizer = kw.get("tokenizer") or tok_path
        if not tokenizer:
            raise click.UsageError(f"{checkpoint} has no tokenizer: pass --tokenizer")
        base = pre_cfg
        defaults = {"train": {"steps": 1, "micro_batch_size": 4, "global_batch_size": 16, "eval_interval": 0,
                              "save_interval": 0}, "optim": {"lr": 1e-4, "warmup_steps": 0, "decay_steps": None,
                                                             "lr_schedule": "linear", "min_lr": 0.0,
                                                             "weight_decay": 0.01}}
        from mwb.core.config import update
        base = update(base, defaults)
        base = update(base, {"parallel": {k: v for k, v in vars(type(base.parallel)()).items()}})
        cfg = build_config(None, kw, base=base)
        out = kw.get("out") or default_out(f"finetune-{name}")
        job = {"task": name, "data": os.path.abspath(data), "checkpoint": os.path.abspath(checkpoint),
               "out": out, "epochs": epochs, "tokenizer": os.path.abspath(tokenizer), "resume": kw.get("resume")}
        finetune(name, cfg, job, kw.get("nproc"))
    return cmd


@click.group(help="Fine-tune a pretrained checkpoint on a task.")
def finetune():
    pass


finetune.add_command(_task_command("race"))

from .retrieval_cmds import dpr  # noqa: E402  (DPR bi-encoder fine-tuning, mwb/retrieval)

finetune.add_command(dpr)
