"""One setup path for every fine-tuning command: the starting checkpoint, then the run's config.

Why one module: ``mwb finetune TASK``, ``mwb finetune story``, ``mwb finetune detox`` and ``mwb detox`` all
answer the same questions before training — which checkpoint when none is given, whether it holds an
architecture the job fine-tunes, which tokenizer, and which config (the checkpoint's model, the fine-tuning
defaults, the job's own defaults, then the user's flags). Answered once here, the answers cannot drift
apart between commands. ``mwb eval`` asks only the first question, with its own rule
(:func:`eval_checkpoint`).

The rule for a missing ``--checkpoint`` (:func:`starting_checkpoint`), from a :class:`~.finetuning_spec.Start`: a named
real model when its package is installed (``minilm-l6`` for encoder tasks); else the newest run of the right
``mwb pretrain``; else a tiny one trained now. Each choice is said out loud.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Callable, Optional, Union

from mwb.core import named_models
from mwb.core.compose import check_tokenizer_fits, full_state
from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.errors import MwbError
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.run_dir import default_out, latest_run
from mwb.evaluation.loading import resolve_checkpoint

from .finetune import finetune
from .finetuning_spec import Start

Say = Callable[[str], None]
Configure = Callable[[RunConfig], RunConfig]

# What every fine-tuning job starts from, on top of the pretrained checkpoint's own config: one step (the
# runners set the real count), the pretraining run's schedule, batch ramp-up, packing (a packed fine-tuning run's
# --pack) and parallel layout dropped.
FINETUNE_DEFAULTS = {
    "train": {"steps": 1, "micro_batch_size": 4, "global_batch_size": 16, "eval_interval": 0, "save_interval": 0,
              "rampup_batch_size": None, "pack": False},
    "optim": {"lr": 1e-4, "warmup_steps": 0, "decay_steps": None, "lr_schedule": "linear", "min_lr": 0.0,
              "weight_decay": 0.01},
}


@dataclasses.dataclass(frozen=True)
class Setup:
    """A fine-tuning job's resolved start: absolute checkpoint and tokenizer paths, and the run's config."""
    checkpoint: str
    tokenizer: str
    cfg: RunConfig


def named_installed(name: str) -> bool:
    """True when registered model ``name``'s package is installed (its weights are on this machine)."""
    return named_models.installed_files(named_models.MODELS[name]) is not None


# The real GPT the generative defaults start from when the models extra (and its SmolLM2 package) is installed,
# and what a no-argument run then trains: LoRA adapters (rank 8) instead of all 135M weights, which would not
# fit the 10-minute default on 2 cores; a higher learning rate, as adapters want.
REAL_GPT = "smollm2-135m"
REAL_GPT_LORA = {"lora": {"rank": 8, "alpha": 16.0}, "optim": {"lr": 1e-3}}


def generative_start(checkpoint: Optional[str]) -> tuple[Start, bool]:
    """The one rule for where a generative default starts: ``(start, real)``. Without ``--checkpoint`` and with
    :data:`REAL_GPT` installed, ``real`` is True (the job scales itself to it and adds :data:`REAL_GPT_LORA`);
    :func:`starting_checkpoint` with the returned start says which model it picked, and why (the named model,
    else — saying it is not installed and how to install it — the newest GPT run or a tiny one trained now)."""
    return Start("gpt", named=REAL_GPT), checkpoint is None and named_installed(REAL_GPT)


def start_label(checkpoint: Optional[str], real: bool) -> str:
    """Which start a fine-tuning run took, in words, for its log and ``results.json``'s ``start``."""
    if checkpoint:
        return f"--checkpoint {checkpoint}"
    return f"{REAL_GPT} with LoRA rank {REAL_GPT_LORA['lora']['rank']}" if real else \
        f"an mwb GPT run (the newest, or a tiny one trained now; {REAL_GPT} not installed or not declared)"


def update_tree(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s leaves written in (nested dicts merged)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = update_tree(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def starting_checkpoint(start: Start, say: Say) -> str:
    """The checkpoint a job starts from when none is given: ``start.named`` when installed, else the newest
    ``runs/pretrain-ARCH[-DATA]-*`` run, else a tiny one trained now by ``mwb pretrain`` (a subprocess)."""
    arch = start.arch.upper()
    if start.named and named_installed(start.named):
        say(f"mwb: no --checkpoint given: starting from {start.named} (a real pretrained {arch}; mwb models list)")
        return named_models.local_checkpoint(start.named)
    corpus = f"named data '{start.data}'" if start.data else "the bundled corpus"
    absent = ""
    if start.named:
        absent = (f"{start.named} is not installed ({named_models.MODELS[start.named].install}, and pip install "
                  f"-e \".[models]\"), so ")
    run = latest_run(start.run_prefix)
    if run:
        say(f"mwb: no --checkpoint given: {absent}starting from the newest {arch} pretraining run on {corpus}: {run}")
        return run
    out = default_out(start.run_prefix)
    say(f"mwb: no --checkpoint given and no {start.run_prefix} run under runs/: {absent}pretraining a tiny {arch} "
        f"first ({out}, {start.steps} steps on {corpus}); a real pretrained model or a longer run does better")
    cmd = [sys.executable, "-m", "mwb", "pretrain", start.arch, "--steps", str(start.steps), "--eval-interval", "0",
           "--out", out] + (["--data", start.data] if start.data else [])
    if subprocess.call(cmd) != 0:
        raise MwbError(f"the {arch} pretraining run failed; pass --checkpoint DIR")
    return out


def finetune_setup(what: str, arches: tuple[str, ...], start: Start, checkpoint: Optional[str],
                   configure: Configure, tokenizer: Optional[str], say: Say,
                   defaults: Union[dict, Callable[[RunConfig], dict]] = None) -> Setup:
    """Resolve the start (``checkpoint``, else :func:`starting_checkpoint`), check it holds one of ``arches``,
    pick the tokenizer (``tokenizer``, else the checkpoint's) and build the config: the checkpoint's, then
    :data:`FINETUNE_DEFAULTS`, the job's ``defaults`` (a tree, or a function of the pretrained config giving one),
    a fresh parallel layout, then ``configure`` (the user's preset/YAML/flags/``--set``)."""
    checkpoint = named_models.local_checkpoint(checkpoint) if checkpoint else starting_checkpoint(start, say)
    pre_cfg, vocab, _, tok_path = full_state(checkpoint)
    if pre_cfg.model.arch not in arches:
        raise ConfigError(f"{checkpoint} holds a '{pre_cfg.model.arch}' model; {what} fine-tunes "
                          f"{' or '.join(a.upper() for a in arches)}")
    tokenizer = tokenizer or tok_path
    if not tokenizer:
        raise ConfigError(f"{checkpoint} has no tokenizer: pass --tokenizer")
    check_tokenizer_fits(vocab, load_tokenizer(tokenizer).vocab_size, checkpoint, tokenizer)
    own = defaults(pre_cfg) if callable(defaults) else (defaults or {})
    base = update(update(pre_cfg, FINETUNE_DEFAULTS), own)
    base = update(base, {"parallel": dataclasses.asdict(type(base.parallel)())})
    return Setup(os.path.abspath(checkpoint), os.path.abspath(tokenizer), configure(base))


def finetune_task(cls, task_opts: dict, checkpoint: Optional[str], data: Optional[str], epochs: Optional[int],
                  configure: Configure, tokenizer: Optional[str], out: Optional[str], nproc: Optional[int],
                  resume: bool, say: Say) -> tuple[dict, str]:
    """``mwb finetune TASK``: set up from the task's declarations (:meth:`~.base.Task.start`, ``arches``,
    ``finetuning``) and run the fine-tuning runner. Returns (``results.json``'s content, the run directory).

    A task that declares ``finetuning.real`` (:class:`~.finetuning_spec.RealScale`) starts, without ``--checkpoint``,
    by :func:`generative_start`'s rule, the one ``mwb finetune story`` uses: SmolLM2-135M with LoRA at the
    declared scale when installed, else its own start. The start taken is said and kept in ``results.json``."""
    scale = cls.finetuning.real
    start, real = generative_start(checkpoint) if scale is not None else (None, False)
    if real:  # the real start's smaller scale: option defaults under what the user gave
        task_opts = {**scale.task_opts, **task_opts}
    task = cls(**task_opts)
    if epochs is not None and epochs < 1:
        raise ConfigError(f"--epochs must be at least 1, got {epochs}")
    data = data or task.data_path(None)  # a task without bundled data fails before any pretraining
    defaults = task.finetuning.config
    if real:
        defaults = update_tree(update_tree(defaults, REAL_GPT_LORA), scale.config)
        epochs = scale.epochs if epochs is None else epochs
    setup = finetune_setup(f"task '{cls.name}' ({cls.objective})", task.arches(),
                           start if real else task.start(), checkpoint, configure, tokenizer, say, defaults=defaults)
    label = start_label(checkpoint, real)
    epochs = task.finetuning.epochs if epochs is None else epochs
    if checkpoint is None:
        shown = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in scale.task_opts.items()) if real else ""
        say(f"mwb: {cls.name} start: {label}; {epochs} epoch(s)" + (f", {shown}" if shown else ""))
    out = out or default_out(f"finetune-{cls.name}")
    job = {"task": cls.name, "task_opts": task_opts, "data": os.path.abspath(data) if os.path.exists(data) else data,
           "checkpoint": setup.checkpoint, "out": out, "epochs": epochs, "tokenizer": setup.tokenizer,
           "resume": resume, "start": label}
    return finetune(cls.name, setup.cfg, job, nproc), out


def eval_checkpoint(cls, checkpoint: Optional[str], say: Say) -> str:
    """What ``mwb eval TASK`` evaluates: ``checkpoint``; else the task's own model
    (:meth:`~.base.Task.default_checkpoint`); else, for a trainable task, its newest fine-tuning run; else the
    newest GPT pretraining run. Evaluation never trains a model to have one."""
    if checkpoint:
        return checkpoint
    own = cls.default_checkpoint(say=say)
    if own:
        return own
    if cls.trainable():
        run = latest_run(f"finetune-{cls.name}")
        if run is None:
            raise ConfigError(f"no --checkpoint given and no runs/finetune-{cls.name}-* run: pass --checkpoint "
                              f"or run `mwb finetune {cls.name}` first")
        say(f"no --checkpoint given: using the newest fine-tuning run {run}")
        return run
    return resolve_checkpoint(None, say=say)
