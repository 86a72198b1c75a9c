"""Flags shared by every training command (INTERFACE.md) and how they become a :class:`RunConfig`; and the one
flag the inference commands share (:data:`pack_weights_option`).

Precedence, lowest first: built-in preset → the run's saved ``config.yaml`` (with ``--resume``) →
``--config FILE.yaml`` → explicit flags → ``--set KEY=VALUE``. Flags default to None so that only what the
user typed overrides the layers below.
"""
from __future__ import annotations

from typing import Optional

import click

from mwb.core.config import RunConfig, apply_sets, load_yaml, update
from mwb.core.presets import apply_preset
from mwb.core.training.run_dir import default_out  # noqa: F401  (runs/<command>-<time>, for every command)
from mwb.core.training.tracking import BACKENDS, check_available

FLAG_TO_KEY = {
    "tp": "parallel.tp", "pp": "parallel.pp", "vpp": "parallel.vpp", "ep": "parallel.ep", "cp": "parallel.cp",
    "sp": "parallel.sp", "distributed_optimizer": "parallel.distributed_optimizer",
    "fsdp": "parallel.fsdp",
    "recompute": "parallel.recompute", "precision": "train.precision", "steps": "train.steps",
    "micro_batch_size": "train.micro_batch_size", "global_batch_size": "train.global_batch_size",
    "seq_length": "train.seq_length", "seed": "train.seed", "save_interval": "train.save_interval",
    "keep_last": "train.keep_last", "async_save": "train.async_save", "eval_interval": "train.eval_interval", "eval_steps": "train.eval_steps",
    "tokenizer": "data.tokenizer", "split": "data.split", "lr": "optim.lr", "compile": "train.compile",
    "rampup_batch_size": "train.rampup_batch_size", "lora": "lora.rank", "lora_alpha": "lora.alpha",
    "lora_dropout": "lora.dropout", "lora_targets": "lora.targets", "pack": "train.pack", "log": "logging.log",
}

log_option = click.option(
    "--log", "log", multiple=True, type=click.Choice(BACKENDS), metavar="wandb|mlflow|tensorboard",
    help="Also log the config, every metrics.jsonl field and the energy figures to this tracker (repeatable): W&B "
         "offline under OUT/wandb unless WANDB_MODE is set; MLflow to MLFLOW_TRACKING_URI, else file:OUT/mlruns; "
         "TensorBoard (written by default) under OUT/tensorboard. Needs pip install 'mwb[tracking]'.")


pack_weights_option = click.option(
    "--pack-weights/--no-pack-weights", default=None,
    help="Run the linears through oneDNN on weights packed once at load (default: on CPU; faster decoding, one "
         "more copy of the weights in memory).")


def training_options(fn):
    """Decorate a click command with the shared training flags."""
    opts = [
        click.option("--preset", default=None, help="Named model preset (see `mwb plan --help`)."),
        click.option("--config", "config_file", type=click.Path(), default=None,
                     help="A YAML config file (sections model/parallel/optim/train/data/logging/energy)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override any config field by its dotted name, e.g. --set model.num_layers=2."),
        click.option("--nproc", type=click.IntRange(min=1), default=None,
                     help="Spawn N local ranks through torch.distributed's elastic launcher (ignored under torchrun)."),
        click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel size."),
        click.option("--pp", type=click.IntRange(min=1), default=None, help="Pipeline-parallel size."),
        click.option("--vpp", type=click.IntRange(min=1), default=None,
                     help="Virtual pipeline stages per rank (interleaved 1F1B)."),
        click.option("--ep", type=click.IntRange(min=1), default=None, help="Expert-parallel size."),
        click.option("--cp", type=click.IntRange(min=1), default=None, help="Context-parallel size."),
        click.option("--sp/--no-sp", default=None, help="Sequence parallelism (needs --tp > 1)."),
        click.option("--distributed-optimizer", is_flag=True, default=None,
                     help="Shard fp32 master weights and optimizer state over data-parallel ranks."),
        click.option("--fsdp", is_flag=True, default=None,
                     help="FSDP2: shard parameters, gradients and optimizer state over data-parallel ranks "
                          "(composes with --tp; fp32 or bf16 with fp32 reduction)."),
        click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16", "fp8"]), default=None,
                     help="Parameter/activation precision (fp16 uses dynamic loss scaling; fp8: bf16 weights, "
                          "e4m3/e5m2 GEMMs in the blocks, emulated on CPU)."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default=None,
                     help="Activation recomputation."),
        click.option("--compile/--no-compile", "compile", default=None,
                     help="torch.compile each transformer block (CPU/GPU; the first steps pay the compile)."),
        click.option("--steps", type=click.IntRange(min=1), default=None, help="Optimizer steps."),
        click.option("--micro-batch-size", type=click.IntRange(min=1), default=None),
        click.option("--global-batch-size", type=click.IntRange(min=1), default=None),
        click.option("--rampup-batch-size", type=int, nargs=3, default=None, metavar="START INCREMENT SAMPLES",
                     help="Megatron's batch-size ramp-up: start at START, add INCREMENT every "
                          "SAMPLES / ((global − START) / INCREMENT) consumed samples."),
        click.option("--lora", type=click.IntRange(min=1), default=None, metavar="RANK",
                     help="LoRA adapters of this rank on the blocks' linear layers; the base is frozen."),
        click.option("--lora-alpha", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="LoRA scale numerator (scale alpha/rank) [rank]."),
        click.option("--lora-dropout", type=click.FloatRange(0, 1, max_open=True), default=None,
                     help="Dropout on the adapters' input [0]."),
        click.option("--lora-targets", default=None, metavar="qkv,proj,fc1,fc2",
                     help="Which linear layers get adapters [all four]."),
        click.option("--seq-length", type=click.IntRange(min=1), default=None),
        click.option("--lr", type=click.FloatRange(min=0), default=None, help="Peak learning rate."),
        click.option("--seed", type=int, default=None, help="Same seed, data and layout ⇒ bit-identical run on CPU."),
        click.option("--eval-interval", type=click.IntRange(min=0), default=None, help="Validate every N steps."),
        click.option("--eval-steps", type=click.IntRange(min=1), default=None,
                     help="Validation batches per evaluation."),
        click.option("--save-interval", type=click.IntRange(min=0), default=None,
                     help="Checkpoint every N steps (always at the end and on SIGTERM/SIGINT)."),
        click.option("--keep-last", type=click.IntRange(min=0), default=None,
                     help="Keep only the newest N checkpoints."),
        click.option("--async-save", is_flag=True, default=None,
                     help="Write checkpoints in the background from CPU copies while training goes on (the "
                          "next save and the end of the run wait; `latest` moves once a checkpoint is whole)."),
        click.option("--resume", is_flag=True, default=False,
                     help="Continue from OUT's latest checkpoint (any parallel layout)."),
        click.option("--out", type=click.Path(), default=None,
                     help="Run directory (default runs/<command>-<timestamp>)."),
        click.option("--tokenizer", type=click.Path(), default=None, help="Tokenizer path (kind inferred)."),
        click.option("--split", default=None, help="train,valid,test weights over documents, e.g. 949,50,1."),
        log_option,
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def build_config(default_preset: Optional[str], kw: dict, data: Optional[list] = None,
                 base: Optional[RunConfig] = None) -> RunConfig:
    """Compose the run's config from a preset, a saved or given YAML, flags and ``--set``."""
    cfg = base or RunConfig()
    preset = kw.get("preset") or (None if base is not None else default_preset)
    if preset:
        cfg = apply_preset(cfg, preset)
    if kw.get("config_file"):
        cfg = load_yaml(cfg, kw["config_file"])
    tree: dict = {}
    for flag, key in FLAG_TO_KEY.items():
        value = kw.get(flag)
        if value is not None and value != ():  # (click gives an unset nargs option as None or ())
            sec, field = key.split(".")
            tree.setdefault(sec, {})[field] = value
    if data:
        tree.setdefault("data", {})["data"] = list(data)
    if kw.get("out"):
        tree.setdefault("train", {})["out"] = kw["out"]
    cfg = update(cfg, tree)
    cfg = apply_sets(cfg, kw.get("sets") or ())
    check_available(cfg.logging.log)  # a missing tracker library fails here, before any rank starts
    return cfg
