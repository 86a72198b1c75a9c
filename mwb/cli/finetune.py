"""``mwb finetune TASK``: fine-tune a checkpoint on any trainable task of the registry (``--list`` shows them).

One command per task, made from the registry, so a new task file needs no change here. Task options
(``Task.options``) pass through as ``--name value``; everything else is the shared training flags.
"""
from __future__ import annotations

import os

import click

from .options import build_config, training_options


def _task_command(name: str, cls) -> click.Command:
    task = cls()
    arches = " or ".join(("a BERT encoder" if a == "bert" else f"a {a.upper()}") for a in task.arches())

    @click.command(name=name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                   help=f"{cls.description}\n\n--checkpoint takes an mwb run/checkpoint, a named model or a Hugging "
                        f"Face directory ({arches}); with none, {task.start().describe()}. --data takes the task's "
                        f"official layout; with none, its bundled sample. {task.finetuning.larger} Task options: "
                        + (", ".join("--" + k.replace("_", "-") for k in cls.options) or "none") + ".")
    @training_options
    @click.option("--checkpoint", default=None, help="Pretrained checkpoint (mwb, named model or Hugging Face).")
    @click.option("--data", default=None, type=click.Path(), help="Task data directory or file.")
    @click.option("--epochs", type=click.IntRange(min=1), default=None,
                  help=f"Training epochs [the task's default: {task.finetuning.epochs}].")
    @click.option("--pack", is_flag=True, default=None,
                  help="Generative tasks on a GPT: pack samples first-fit into --seq-length rows, each attending only "
                       "to itself, positions restarting (Megatron's --reset-attention-mask --reset-position-ids); "
                       "--global-batch-size then counts rows.")
    @click.pass_context
    def cmd(ctx, checkpoint, data, epochs, **kw):
        from mwb.tasks.api.base import parse_task_args
        from mwb.tasks.api.setup import finetune_task

        say = lambda m: click.echo(m, err=True)  # noqa: E731
        results, out = finetune_task(cls, parse_task_args(cls, ctx.args), checkpoint, data, epochs,
                                     lambda base: build_config(None, kw, base=base), kw.get("tokenizer"),
                                     kw.get("out"), kw.get("nproc"), kw.get("resume"), say)
        if results:
            shown = {k: v for k, v in results["metrics"].items() if isinstance(v, float)}
            say("mwb: dev " + "  ".join(f"{k} {v:.4f}" for k, v in shown.items()))
            say(f"mwb: best checkpoint {results['best_checkpoint']} (epoch {results['metrics'].get('epoch')})")
            say(f"mwb: results         {os.path.join(out, 'results.json')}")
            say(f"mwb: run directory   {os.path.abspath(out)}")
    return cmd


class TaskGroup(click.Group):
    """Subcommands: every trainable task of the registry, plus the commands added explicitly (dpr)."""

    def list_commands(self, ctx):
        from mwb.tasks.api.registry import list_tasks
        return sorted(set(list_tasks(trainable=True)) | set(self.commands))

    def get_command(self, ctx, name):
        if name in self.commands:
            return self.commands[name]
        from mwb.tasks.api.registry import get_task
        try:
            cls = get_task(name)
        except Exception:
            return None
        return _task_command(cls.name, cls) if cls.trainable() else None


@click.group(cls=TaskGroup, invoke_without_command=True, help="Fine-tune a pretrained checkpoint on a task.")
@click.option("--list", "list_", is_flag=True, help="List the tasks that can be fine-tuned.")
@click.pass_context
def finetune(ctx, list_):
    if list_:
        from mwb.tasks.api.registry import list_tasks
        for name, cls in list_tasks(trainable=True).items():
            click.echo(f"{name:16s} {cls.description}")
        for name, cmd in sorted(ctx.command.commands.items()):  # the pipelines that are more than one task
            first = (cmd.help or "").split("\n")[0]
            click.echo(f"{name:16s} {first if len(first) <= 100 else first[:97] + '...'}")
    elif ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


from .detox_finetune import detox_finetune  # noqa: E402  (SGEAT domain-adaptive training, mwb/tasks/detox)
from .retriever_training import dpr, e2e_qa  # noqa: E402  (DPR, joint retriever + reader: mwb/retrieval)
from .story import finetune_story  # noqa: E402  (MEGATRON-CNTRL: every part, mwb/tasks/story)

for _command in (dpr, e2e_qa, detox_finetune, finetune_story):
    finetune.add_command(_command)
