"""``mwb finetune TASK``: fine-tune a checkpoint on any trainable task of the registry (``--list`` shows them).

One command per task, made from the registry, so a new task file needs no change here. Task options
(``Task.options``) pass through as ``--name value``; everything else is the shared training flags.
"""
from __future__ import annotations

import os

import click

from .options import build_config, default_out, training_options
from .starting_points import FINETUNE_DEFAULTS, default_checkpoint

def _task_command(name: str, cls) -> click.Command:
    arch = "bert" if cls.objective != "generative" else "gpt"

    @click.command(name=name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                   help=f"{cls.description}\n\n--checkpoint takes an mwb run/checkpoint or a Hugging Face directory "
                        f"({'a BERT encoder' if arch == 'bert' else 'a GPT or a T5'}); with none, the newest "
                        f"`mwb pretrain {arch}` run (a tiny one is trained first if there is none). --data takes the "
                        f"task's official layout; with none, its bundled sample. Task options: "
                        + (", ".join("--" + k.replace("_", "-") for k in cls.options) or "none") + ".")
    @training_options
    @click.option("--checkpoint", default=None, help="Pretrained checkpoint (mwb or Hugging Face).")
    @click.option("--data", default=None, type=click.Path(), help="Task data directory or file.")
    @click.option("--epochs", type=int, default=3, show_default=True, help="Training epochs.")
    @click.pass_context
    def cmd(ctx, checkpoint, data, epochs, **kw):
        from mwb.core.compose import full_state
        from mwb.core.config import ConfigError, update
        from mwb.core.named_models import local_checkpoint
        from mwb.tasks.api.base import parse_task_args
        from mwb.tasks.api.finetune import check_arch, finetune

        task_opts = parse_task_args(cls, ctx.args)
        task = cls(**task_opts)
        say = lambda m: click.echo(m, err=True)  # noqa: E731
        data = data or task.data_path(None)  # a task without bundled data fails before any pretraining
        start = getattr(task, "base_checkpoint", lambda say: None)  # a task's own starting model (qa-reader)
        checkpoint = local_checkpoint(checkpoint or start(say) or default_checkpoint(
            getattr(task, "base_arch", arch), say, *getattr(cls, "default_pretraining", (None, 300))))
        pre_cfg, _, _, tok_path = full_state(checkpoint)
        check_arch(task, pre_cfg.model.arch, checkpoint)
        tokenizer = kw.get("tokenizer") or tok_path
        if not tokenizer:
            raise ConfigError(f"{checkpoint} has no tokenizer: pass --tokenizer")
        base = update(pre_cfg, FINETUNE_DEFAULTS)
        base = update(base, {"parallel": {k: v for k, v in vars(type(base.parallel)()).items()}})
        cfg = build_config(None, kw, base=base)
        out = kw.get("out") or default_out(f"finetune-{name}")
        job = {"task": name, "task_opts": task_opts, "data": os.path.abspath(data) if os.path.exists(data) else data,
               "checkpoint": os.path.abspath(checkpoint), "out": out, "epochs": epochs,
               "tokenizer": os.path.abspath(tokenizer), "resume": kw.get("resume")}
        results = finetune(name, cfg, job, kw.get("nproc"))
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
from .retrieval_cmds import dpr, e2e_qa  # noqa: E402  (DPR, joint retriever + reader: mwb/retrieval)
from .story import finetune_story  # noqa: E402  (MEGATRON-CNTRL: every part, mwb/tasks/story)

for _command in (dpr, e2e_qa, detox_finetune, finetune_story):
    finetune.add_command(_command)
