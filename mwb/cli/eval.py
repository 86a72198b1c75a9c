"""``mwb eval TASK``: evaluate a checkpoint on a registered task and write ``OUT/results.json``.

Task-specific flags (``--strict`` for LAMBADA, flags of fine-tuning or QA tasks) are not known to this
command: they are declared by each task (``Task.options``) and passed through, so a new task needs no
change here. All the work is in :mod:`mwb.evaluation`; this module only parses, launches and prints.
"""
from __future__ import annotations

import json
import os

import click

EPILOG = """\b
Examples:
  mwb eval --list
  mwb eval lambada --checkpoint runs/pretrain-gpt-X --data lambada_test.jsonl [--strict]
  mwb eval wikitext --checkpoint hf_gpt2_dir --data wiki.test.tokens --seq-length 1024 --overlap 32

With no --data a task's bundled sample is used; with no --checkpoint the newest runs/pretrain-gpt-* run."""


def _list_tasks() -> None:
    from mwb.evaluation.registry import list_tasks

    for name, cls in list_tasks().items():
        click.echo(f"{name:14s} {cls.kind:9s} {cls.description}")
        for opt, o in cls.options.items():
            click.echo(f"{'':25s}--{opt.replace('_', '-')} ({o.type.__name__}, default {o.default}): {o.help}")


def run_eval(task_name: str, task_opts: dict, checkpoint: str, data, out: str, tokenizer, limit) -> dict:
    """Evaluate on this process (one rank of ``--nproc N`` when launched); rank 0 writes results.json."""
    from mwb.core.training.launch import init_distributed
    from mwb.evaluation.evaluator import evaluate
    from mwb.evaluation.registry import get_task
    from mwb.evaluation.results import write_results
    from mwb.core.config import to_dict

    rank, world, device = init_distributed()
    task = get_task(task_name)(**task_opts)
    cfg, lm = task.load_model(checkpoint, tokenizer, device=device)
    if task_opts.get("seq_length") is None and "seq_length" in task.options and hasattr(lm, "max_length"):
        # default context: the length an mwb model was trained at; a Hugging Face model's full context
        from mwb.core.convert import is_hf_dir
        trained = lm.max_length if is_hf_dir(checkpoint) else min(cfg.train.seq_length, lm.max_length)
        task.opts["seq_length"] = min(trained, 1024)
    report = evaluate(task, lm, data, limit=limit)
    if rank == 0:
        path = write_results(out, task.name, report["metrics"], checkpoint=os.path.abspath(checkpoint),
                             config=to_dict(cfg),
                             extra={"data": _where(task.data_path(data)), "task_options": task.opts,
                                    "num_examples": report["num_examples"], "seconds": report["seconds"],
                                    "world_size": world})
        report["path"] = path
    return report


def _where(path: str) -> str:
    return os.path.abspath(path) if os.path.exists(path) else path  # a hub dataset name stays a name


@click.command(name="eval", epilog=EPILOG,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("task", required=False)
@click.option("--list", "list_", is_flag=True, help="List the registered tasks and their options.")
@click.option("--checkpoint", default=None, help="mwb run/checkpoint directory, consolidated .safetensors, "
                                                 "or Hugging Face model directory.")
@click.option("--data", default=None, help="Task data (local file in the official format, or a hub name online).")
@click.option("--out", type=click.Path(), default=None, help="Output directory (default runs/eval-TASK-<time>).")
@click.option("--tokenizer", default=None, help="Override the checkpoint's tokenizer.")
@click.option("--seq-length", type=int, default=None, help="Context length (default: the checkpoint's).")
@click.option("--overlap", type=int, default=None, help="WikiText: new tokens scored per window (Megatron's "
                                                        "--overlapping-eval).")
@click.option("--batch-size", type=int, default=None, help="Sequences per forward pass.")
@click.option("--limit", type=int, default=None, help="Evaluate only the first N examples.")
@click.option("--nproc", type=int, default=None, help="Data-parallel ranks to spawn (examples are sharded).")
@click.pass_context
def eval_cmd(ctx, task, list_, checkpoint, data, out, tokenizer, seq_length, overlap, batch_size, limit, nproc):
    """Evaluate a checkpoint on TASK (`mwb eval --list` shows the tasks)."""
    from mwb.core.config import ConfigError
    from mwb.evaluation.loading import resolve_checkpoint
    from mwb.evaluation.registry import get_task
    from mwb.evaluation.task import parse_task_args

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
    if checkpoint is None and hasattr(cls, "default_checkpoint"):  # a task with its own default model (qa)
        checkpoint = cls.default_checkpoint(say=lambda m: click.echo(m, err=True))
    checkpoint = resolve_checkpoint(checkpoint, say=lambda m: click.echo(m, err=True))
    from mwb.cli.options import default_out
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
