"""``mwb pretrain ict``, ``mwb pretrain mss`` and ``mwb finetune dpr``: train a bi-encoder with the shared trainer, log, checkpoint.

The flow is ``mwb pretrain``'s (:mod:`mwb.pretraining.run`): the launching process resolves the tokenizer,
data and initial weights once (:func:`plan_run`), then every rank runs :func:`rank_main` — on this process,
under ``torchrun``, or on ``--nproc N`` spawned ranks. Each rank builds the datasets (deterministic, so
identical everywhere), a :class:`~mwb.core.training.trainer.Trainer` over :class:`~.biencoder_spec.BiEncoderSpec`,
optionally copies initial weights in (a Hugging Face / mwb BERT into both towers, or an earlier bi-encoder),
and trains. Checkpoints carry the tokenizer and ``biencoder/biencoder.json``, so ``mwb eval qa --checkpoint
OUT`` and ``--resume`` need nothing else. ``finetune dpr`` ends with DPR's validation view (every held-out
question ranks all held-out contexts) in ``OUT/results.json``.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Optional

from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.presets import apply_preset

from .biencoder import RetrievalConfig
from .inputs import BUNDLED_DPR_TRAIN, BUNDLED_EVIDENCE

KINDS = ("ict", "mss", "dpr")
BLOCK_KINDS = ("ict", "mss")  # pseudo-queries made from evidence blocks (ICT: a sentence; MSS: a masked salient span)
# Bundled-default schedules: a tiny BERT trains in about a minute on two CPU cores.
DEFAULTS = {
    "ict": {"train": {"steps": 150, "micro_batch_size": 32, "global_batch_size": 32, "seq_length": 128,
                      "eval_interval": 50, "eval_steps": 2},
            "optim": {"lr": 1e-4, "min_lr": 0.0, "warmup_steps": 10}},
    "mss": {"train": {"steps": 100, "micro_batch_size": 32, "global_batch_size": 32, "seq_length": 128,
                      "eval_interval": 50, "eval_steps": 2},
            "optim": {"lr": 1e-4, "min_lr": 0.0, "warmup_steps": 10}},
    "dpr": {"train": {"steps": 50, "micro_batch_size": 16, "global_batch_size": 16, "seq_length": 128,
                      "eval_interval": 25, "eval_steps": 2},
            "optim": {"lr": 1e-4, "min_lr": 0.0, "warmup_steps": 10}},
}
PRETRAINED_LR = 2e-5  # DPR's learning rate when starting from a pretrained encoder
# From random weights, [CLS] vectors are nearly input-independent and unscaled scores (norm² ≈ h) saturate the
# softmax: training collapses to uniform scores. Mean pooling of L2-normalised embeddings with a temperature
# (cosine / 0.05, as in contrastive sentence encoders) learns within the bundled budget instead, and one
# shared tower keeps questions and passages in one space (two random towers drift apart on so little data).
FROM_SCRATCH = RetrievalConfig(shared=True, pooling="mean", normalize=True, score_scale="temperature",
                               temperature=0.05)


@dataclasses.dataclass(frozen=True)
class RetrieverPlan:
    """What every rank needs: which objective, tokenizer, data files, initial weights and bi-encoder settings."""
    kind: str
    tokenizer: str
    vocab_size: int
    data: str
    valid: Optional[str]
    init: Optional[str]
    rcfg: dict


def base_config(kind: str, checkpoint: Optional[str]) -> tuple[RunConfig, Optional[object]]:
    """Preset + bundled-default schedule, with the model section of ``checkpoint`` when one is given (flags,
    ``--config`` and ``--set`` apply on top). Returns (config, opened source or None)."""
    cfg = update(apply_preset(RunConfig(), "bert-tiny"), DEFAULTS[kind])
    if not checkpoint:
        return cfg, None
    from .loading import open_source, with_model

    source = open_source(checkpoint)
    cfg = update(with_model(cfg, source), {"optim": {"lr": PRETRAINED_LR, "min_lr": 0.0}})
    if source.own_settings:  # an earlier bi-encoder keeps its passage length unless --seq-length says otherwise
        cfg = update(cfg, {"train": {"seq_length": source.rcfg.context_length}})
    return cfg, source


def plan_run(kind: str, cfg: RunConfig, rcfg_flags: dict, data: Optional[str], valid: Optional[str],
             checkpoint: Optional[str], source=None) -> tuple[RunConfig, RetrieverPlan]:
    """Resolve tokenizer, vocabulary, data and settings once, before any rank starts."""
    from mwb.core.data.bundled import tokenizer_file
    from mwb.core.tokenizers import load_tokenizer

    from .inputs import specials

    if kind not in KINDS:
        raise ConfigError(f"unknown retriever objective '{kind}'")
    base = RetrievalConfig()
    if source is None and checkpoint:
        from .loading import open_source
        source = open_source(checkpoint)
    if source is not None and source.own_settings:
        base = source.rcfg  # continue an earlier bi-encoder / a sentence-transformers model (cosine ×20) as it was
    elif source is None:
        base = FROM_SCRATCH
    elif kind in BLOCK_KINDS:
        base = base.replace(score_scale="sqrt")  # Megatron's ICT recipe (--retriever-score-scaling)
    rcfg = base.replace(**{"context_length": cfg.train.seq_length, **rcfg_flags})
    if source is not None and source.own_settings and rcfg.context_length != source.rcfg.context_length:
        print(f"mwb: passages are cut at {rcfg.context_length} tokens (--seq-length), not at the "
              f"{source.rcfg.context_length} the starting retriever was trained with", file=sys.stderr)
    if source is not None and cfg.model.vocab_size not in (None, source.vocab_size):
        raise ConfigError(f"model.vocab_size {cfg.model.vocab_size} differs from the checkpoint's {source.vocab_size}")
    tok_path = cfg.data.tokenizer or (source.tokenizer if source is not None else tokenizer_file())
    if not tok_path:
        raise ConfigError(f"{checkpoint} names no tokenizer: pass --tokenizer PATH")
    tok = load_tokenizer(tok_path)
    specials(tok)
    vocab = source.vocab_size if source is not None else (cfg.model.vocab_size or tok.vocab_size)
    if vocab < tok.vocab_size:
        raise ConfigError(f"vocabulary size {vocab} is smaller than the tokenizer's {tok.vocab_size}")
    if rcfg.context_length > cfg.model.max_position_embeddings or rcfg.query_length > cfg.model.max_position_embeddings:
        raise ConfigError(f"sequence lengths exceed model.max_position_embeddings={cfg.model.max_position_embeddings}")
    data = data or (BUNDLED_EVIDENCE if kind in BLOCK_KINDS else BUNDLED_DPR_TRAIN)
    for p in (data, valid):
        if p and not os.path.isfile(os.path.expanduser(p)):
            from mwb.core.errors import DataError
            raise DataError(f"data file not found: {p}")
    cfg = update(cfg, {"model": {"vocab_size": vocab}, "data": {"tokenizer": tok_path}})
    plan = RetrieverPlan(kind, tok_path, vocab, os.path.abspath(os.path.expanduser(data)),
                         os.path.abspath(os.path.expanduser(valid)) if valid else None,
                         source.path if source is not None else None, dataclasses.asdict(rcfg))
    return cfg, plan


def open_datasets(plan: RetrieverPlan, tok, rcfg: RetrievalConfig, seed: int):
    """(train, valid or None). Without ``--valid``, every 20th ICT block / the last 10% of DPR records are
    held out (only when there are enough to spare)."""
    from .data import DPRDataset, ICTDataset, MSSDataset, read_dpr_json

    if plan.kind in BLOCK_KINDS:
        from .inputs import read_evidence
        blocks = ICTDataset if plan.kind == "ict" else MSSDataset
        ev = read_evidence(plan.data)
        if plan.valid:
            return blocks(ev, tok, rcfg, seed), blocks(read_evidence(plan.valid), tok, rcfg, seed + 1)
        if len(ev) < 40:
            return blocks(ev, tok, rcfg, seed), None
        rows = range(len(ev))
        return (blocks(ev, tok, rcfg, seed, [r for r in rows if r % 20 != 19]),
                blocks(ev, tok, rcfg, seed + 1, [r for r in rows if r % 20 == 19]))
    records = read_dpr_json(plan.data)
    if plan.valid:
        return DPRDataset(records, tok, rcfg, seed), DPRDataset(read_dpr_json(plan.valid), tok, rcfg, seed + 1)
    if len(records) < 20:
        return DPRDataset(records, tok, rcfg, seed), None
    cut = len(records) - max(2, len(records) // 10)
    return DPRDataset(records[:cut], tok, rcfg, seed), DPRDataset(records[cut:], tok, rcfg, seed + 1)


def _initialise(trainer, path: str, say) -> None:
    """Copy initial weights into the (possibly TP-sharded) model and refresh the optimizer's fp32 masters."""
    import torch

    from .loading import fill_biencoder, open_source

    source = open_source(path)
    kept = fill_biencoder(trainer.model, source)
    with torch.no_grad():
        for pc in trainer.optimizer.pieces:  # low-precision params have separate fp32 masters
            if not pc.alias:
                pc.master.copy_(pc.param.data.view(-1)[pc.lo:pc.hi].float())
    say(f"mwb: initialised from {source.description}" + (f"; new layers {', '.join(kept)}" if kept else ""),
        file=sys.stderr)


def rank_main(cfg_tree: dict, plan: RetrieverPlan, out: str, resume: bool) -> None:
    """Everything one rank does; rank 0 alone writes logs, results and prints."""
    from mwb.core.config import to_dict
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.training import driver
    from mwb.core.training.run_dir import open_run
    from mwb.core.training.step_actions import StepActions
    from mwb.core.training.trainer import Trainer

    from .loading import write_config_file
    from .biencoder_spec import BiEncoderSpec, retrieval_metrics

    r = driver.start_rank(cfg_tree)
    cfg, rank, world, device, say = r.cfg, r.rank, r.world, r.device, r.say
    rcfg = RetrievalConfig.from_dict(plan.rcfg)
    tok = load_tokenizer(plan.tokenizer)
    train, valid = open_datasets(plan, tok, rcfg, cfg.train.seed)
    trainer = Trainer(cfg, BiEncoderSpec(cfg, plan.vocab_size, rcfg), train, valid, world_size=world, device=device)
    ckpt_root = os.path.join(out, "checkpoints")
    start, latest = driver.resume_latest(trainer, ckpt_root, resume, say)
    if latest is None and plan.init:
        _initialise(trainer, plan.init, say)
    n = sum(math.prod(getattr(p, "full_shape", p.shape)) for p in trainer.model.parameters())
    say(f"mwb: {plan.kind} bi-encoder ({'shared' if rcfg.shared else 'separate'} towers, {n / 1e6:.2f}M "
        f"parameters) on {world} rank(s): tp {trainer.dims.tp} dp {trainer.dims.dp}; in-batch negatives "
        f"per forward: {cfg.train.micro_batch_size * trainer.dims.dp} questions", file=sys.stderr)
    logger = open_run(out, cfg, rank, world, start_step=start,
                      extra={"biencoder": dataclasses.asdict(rcfg),
                             "derived": {"objective": plan.kind, "world_size": world, "dp": trainer.dims.dp,
                                         "data": plan.data, "valid": plan.valid, "init": plan.init}})
    extras = {"tokenizer": plan.tokenizer}
    if rank == 0:
        extras["biencoder"] = write_config_file(rcfg, out)
    actions = StepActions(logger, ckpt_root, cfg.train, extra_files=extras, say=say, saved=latest)
    history, seconds = driver.train(trainer, actions)
    logger.close()
    metrics = {}
    if plan.kind == "dpr":
        metrics = retrieval_metrics(trainer.model, valid if valid is not None else train, rcfg, device)
        if history:
            metrics["train_loss"] = history[-1].loss
    if rank == 0:
        say(f"mwb: {trainer.step} steps in {seconds:.1f} s")
        driver.banner(say, out, (("checkpoint", actions.saved or None),))
        if metrics:
            from mwb.evaluation.results import write_results
            path = write_results(out, "dpr", metrics, checkpoint=actions.saved, config=to_dict(cfg),
                                 extra={"data": plan.data, "valid": plan.valid, "init": plan.init,
                                        "biencoder": dataclasses.asdict(rcfg), "world_size": world})
            say("mwb: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
            say(f"mwb: results         {path}")
        say(f"mwb: evaluate with   mwb eval qa --checkpoint {os.path.abspath(out)}")


def train_retriever(cfg: RunConfig, plan: RetrieverPlan, out: str, nproc: Optional[int], resume: bool) -> None:
    """Run :func:`rank_main` on this process, under torchrun, or on ``nproc`` spawned ranks."""
    from mwb.core.training.driver import launch_training

    launch_training(cfg, out, nproc, rank_main, lambda: plan, resume, no_pp="bi-encoder training")
