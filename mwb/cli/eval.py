"""``mwb eval TASK``: evaluate a checkpoint on a registered task and write ``OUT/results.json``.

Task-specific flags (``--strict`` for LAMBADA, flags of fine-tuning or QA tasks) are not known to this
command: they are declared by each task (``Task.options``) and passed through, so a new task needs no
change here. All the work is in :mod:`mwb.tasks.api.evaluate`; this module only parses, launches and
prints.
"""
from __future__ import annotations

import json
import os

import click

from .options import default_out

EPILOG = """\b
Examples:
  mwb eval --list
  mwb eval lambada --checkpoint runs/pretrain-gpt-X --data lambada_test.jsonl [--strict]
  mwb eval wikitext --checkpoint hf_gpt2_dir --data wiki.test.tokens --seq-length 1024 --overlap 32

With no --data a task's bundled sample is used; with no --checkpoint the task's own model (qa, msdp, bias), the
newest runs/finetune-TASK-* run of a task that fine-tunes, else the newest runs/pretrain-gpt-* run."""


def _list_tasks() -> None:
    from mwb.tasks.api.registry import list_tasks

    for name, cls in list_tasks().items():
        click.echo(f"{name:14s} {cls.objective:22s} {cls.description}")
        for opt, o in cls.options.items():
            click.echo(f"{'':38s}--{opt.replace('_', '-')} ({o.type.__name__}, default {o.default}): {o.help}")


@click.command(name="eval", epilog=EPILOG,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("task", required=False)
@click.option("--list", "list_", is_flag=True, help="List the registered tasks and their options.")
@click.option("--checkpoint", default=None, help="mwb run/checkpoint directory, consolidated .safetensors, "
                                                 "or Hugging Face model directory.")
@click.option("--data", default=None, help="Task data (local file in the official format, or a hub name online).")
@click.option("--out", type=click.Path(), default=None, help="Output directory (default runs/eval-TASK-<time>).")
@click.option("--tokenizer", default=None, help="Override the checkpoint's tokenizer.")
@click.option("--seq-length", type=click.IntRange(min=1), default=None,
              help="Context length (default: the checkpoint's).")
@click.option("--overlap", type=click.IntRange(min=1), default=None,
              help="WikiText: new tokens scored per window (Megatron's --overlapping-eval).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Sequences per forward pass.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Evaluate only the first N examples.")
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help="Data-parallel ranks to spawn (examples are sharded).")
@click.pass_context
def eval_cmd(ctx, task, list_, checkpoint, data, out, tokenizer, seq_length, overlap, batch_size, limit, nproc):
    """Evaluate a checkpoint on TASK (`mwb eval --list` shows the tasks)."""
    from mwb.core.config import ConfigError
    from mwb.tasks.api.base import parse_task_args
    from mwb.tasks.api.evaluate import run_eval
    from mwb.tasks.api.registry import get_task
    from mwb.tasks.api.setup import eval_checkpoint

    if list_:
        return _list_tasks()
    if not task:
        raise ConfigError("name a task: mwb eval TASK (see `mwb eval --list`)")
    cls = get_task(task)
    opts = parse_task_args(cls, ctx.args)
    for key, value in (("seq_length", seq_length), ("overlap", overlap), ("batch_size", batch_size)):
        if value is not None:
            if key not in cls.options:
                raise ConfigError(f"task '{cls.name}' has no option --{key.replace('_', '-')}")
            opts[key] = value
    checkpoint = eval_checkpoint(cls, checkpoint, say=lambda m: click.echo(m, err=True))
    out = out or default_out(f"eval-{cls.name}")
    if nproc and nproc > 1:
        from mwb.core.training.launch import launch
        launch(run_eval, nproc, cls.name, opts, checkpoint, data, out, tokenizer, limit)
        with open(os.path.join(out, "results.json")) as f:
            metrics = json.load(f)["metrics"]
        path = os.path.join(out, "results.json")
    else:
        report = run_eval(cls.name, opts, checkpoint, data, out, tokenizer, limit)
        metrics, path = report["metrics"], report["path"]
    for k, v in metrics.items():
        click.echo(f"{cls.name} {k}: {v:.6g}" if isinstance(v, float) else f"{cls.name} {k}: {v}")
    click.echo(f"results: {path}")
