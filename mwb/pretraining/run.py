"""``mwb pretrain``: resolve data and tokenizer, start the ranks, train, log, checkpoint, report.

Data preparation (tokenizing the bundled corpus on first use) happens once in the launching process, before
any rank starts, so ranks only read finished, cached files. Each rank then runs :func:`rank_main`, which is
also what ``torchrun ... -m mwb pretrain gpt`` reaches through the same CLI.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Optional

from mwb.core.config import ConfigError, RunConfig
from mwb.core.data import pubmed
from mwb.core.errors import DataError

SYNTHETIC = "synthetic"


@dataclasses.dataclass(frozen=True)
class DataPlan:
    """What every rank needs to open the same data: prefixes (or synthetic), tokenizer, vocab size."""
    data: Optional[list]
    tokenizer: Optional[str]
    vocab_size: int


def prepare_data(cfg: RunConfig, log=print) -> DataPlan:
    """Resolve data and tokenizer once, in the launching process, and check the data files open."""
    arch, data = cfg.model.arch, cfg.data.data
    if data and len(data) == 1 and str(data[0]) == SYNTHETIC:
        return DataPlan([SYNTHETIC], None, cfg.model.vocab_size or 512)
    if not data:  # the bundled corpus, tokenized with the run's tokenizer (--tokenizer, else the bundled one)
        from mwb.core.data.bundled import default_data
        data, tok_path = default_data(arch, tokenizer=cfg.data.tokenizer or None)
    elif pubmed.is_named(data):  # --data pubmed | pubmed-uncased | pubmed-general: real MEDLINE abstracts
        data, tok_path = pubmed.named_data(str(data[0]))
    else:
        tok_path = cfg.data.tokenizer
        if not tok_path:
            raise ConfigError("--data needs --tokenizer (the tokenizer the data was preprocessed with)")
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.tokenizers.loader import tokenizer_location
    tok_path = tokenizer_location(tok_path)
    tok = load_tokenizer(tok_path)
    vocab = cfg.model.vocab_size or tok.vocab_size
    if vocab < tok.vocab_size:
        raise ConfigError(f"model.vocab_size {vocab} is smaller than the tokenizer's {tok.vocab_size}")
    from mwb.core.data import IndexedDataset, parse_data
    for prefix in parse_data(data)[0]:
        IndexedDataset(prefix)  # .bin/.idx present and the index well-formed: fail here, not on every rank
    return DataPlan([str(d) for d in data], tok_path, vocab)


def open_datasets(cfg: RunConfig, plan: DataPlan):
    t = cfg.train
    if plan.data == [SYNTHETIC]:
        from mwb.core.training.batches import SyntheticTokens
        return (SyntheticTokens(plan.vocab_size, t.seq_length, seed=t.seed),
                SyntheticTokens(plan.vocab_size, t.seq_length, seed=t.seed + 1))
    from mwb.core.data import build_datasets
    from mwb.core.tokenizers import load_tokenizer
    n_train = t.steps * t.global_batch_size
    n_valid = max(t.eval_steps, 1) * t.global_batch_size
    train, valid, _ = build_datasets(cfg.model.arch, plan.data, load_tokenizer(plan.tokenizer), t.seq_length,
                                     t.seed, cfg.data.split, (n_train, n_valid, 0), cache_dir=cfg.data.cache_dir,
                                     mask_prob=cfg.data.mask_prob)
    if len(train) == 0:
        raise DataError("the training split is empty: check --data and --split")
    return train, (valid if valid is not None and len(valid) > 0 else None)


def spec_for(arch: str):
    try:
        from mwb.pretraining import spec_for as registry
        return registry(arch)
    except ImportError:
        from mwb.core.training.model_spec import GPTSpec
        if arch != "gpt":
            raise
        return GPTSpec


def parameter_counts(trainer) -> dict:
    """Total and active-per-token parameters of the whole model (all ranks)."""
    try:
        from mwb.core.models.arch import count_params
        return count_params(trainer.cfg.model, trainer.spec.vocab_size)
    except (ImportError, AttributeError):
        from mwb.core.plan import ModelShape, count_parameters
        model = dataclasses.replace(trainer.cfg.model, vocab_size=trainer.spec.vocab_size)
        c = count_parameters(ModelShape.from_config(model, trainer.cfg.train.seq_length))
        return {"total": int(c.total), "active": int(c.active)}


def rank_main(cfg_tree: dict, plan: DataPlan, out: str, resume: bool) -> None:
    """Everything one rank does; rank 0 alone writes logs and prints."""
    from mwb.core.training import driver
    from mwb.core.training.metrics_log import flops_per_token
    from mwb.core.training.run_dir import open_run
    from mwb.core.training.step_actions import StepActions
    from mwb.core.training.trainer import Trainer

    r = driver.start_rank(cfg_tree)
    cfg, say = r.cfg, r.say
    train, valid = open_datasets(cfg, plan)
    spec = spec_for(cfg.model.arch)(cfg, plan.vocab_size)
    trainer = Trainer(cfg, spec, train, valid, world_size=r.world, device=r.device)
    ckpt_root = os.path.join(out, "checkpoints")
    start, latest = driver.resume_latest(trainer, ckpt_root, resume, say, announce_missing=True)
    counts = parameter_counts(trainer)
    say(f"mwb: {cfg.model.arch} with {counts['total'] / 1e6:.2f}M parameters "
        f"({counts['active'] / 1e6:.2f}M active per token) on {r.world} rank(s): tp {trainer.dims.tp} "
        f"pp {trainer.dims.pp} dp {trainer.dims.dp} ep {trainer.dims.ep}, {cfg.train.precision}", file=sys.stderr)
    m = cfg.model
    nonembed = counts["active"] - plan.vocab_size * m.hidden_size
    logger = open_run(out, cfg, r.rank, r.world, start_step=start,
                      extra={"derived": {"world_size": r.world, "dp": trainer.dims.dp, "vocab_size": plan.vocab_size,
                                         "tokenizer": plan.tokenizer, "parameters": counts}},
                      flops_per_tok=flops_per_token(nonembed, m.num_layers, cfg.train.seq_length, m.hidden_size))
    actions = StepActions(logger, ckpt_root, cfg.train,
                          extra_files={"tokenizer": plan.tokenizer} if plan.tokenizer else None, say=say, saved=latest)
    _, seconds = driver.train(trainer, actions)
    plot = logger.close()
    say(f"mwb: {trainer.step - start} steps in {seconds:.1f} s (now at step {trainer.step})")
    driver.banner(say, out, (
        ("tensorboard", f"tensorboard --logdir {os.path.join(out, 'tensorboard')}" if cfg.logging.tensorboard
         else None),
        ("loss plot", plot or None), ("checkpoint", actions.saved or None)))


def pretrain(cfg: RunConfig, out: str, nproc: Optional[int], resume: bool) -> None:
    """Prepare data once, then run :func:`rank_main` on this process, under torchrun, or on N spawned ranks."""
    from mwb.core.training.driver import launch_training, silent
    from mwb.core.training.job import first_process

    launch_training(cfg, out, nproc, rank_main,
                    lambda: prepare_data(cfg, log=print if first_process() else silent), resume)
