"""SGEAT's domain-adaptive training: continue GPT pretraining on the filtered self-generated corpus.

As in the paper's scripts: the pretrained weights without their optimizer state (a fresh optimizer),
constant learning rate (2e-5 for the 1.3B model), Adam β = (0.9, 0.95), weight decay 0.1, gradient clip 1.0,
on the ``.bin/.idx`` of the filtered samples (end-of-document appended). It runs on the pretraining trainer
(:class:`~mwb.tasks.api.generative_objective.GenerativeGPTSpec` copies the pretrained tensors into each rank's
chunk), so every layout the trainer has applies. Validation perplexity is measured before and after on a held-out
slice of *pretraining* data: the bundled corpus, tokenized with the model's tokenizer (cached), its
``valid`` documents under the 949,50,1 split — the same documents ``mwb pretrain gpt`` holds out.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from typing import Optional

from mwb.core import checkpoint
from mwb.core.compose import full_state
from mwb.core.config import update
from mwb.core.data import build_datasets
from mwb.core.data.bundled import corpus_file
from mwb.core.data.cache import cache_root, cached_dir, digest, file_digest
from mwb.core.data.preprocess import preprocess
from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.job import first_process, run_job
from mwb.core.training import driver
from mwb.core.training.run_dir import open_run
from mwb.core.training.trainer import Trainer
from mwb.evaluation.results import write_results

from ..api.generative_objective import GenerativeGPTSpec
from ..api.setup import Configure, Say, Setup, finetune_setup
from ..api.finetuning_spec import Start

HELD_OUT_SPLIT = "949,50,1"
PAPER_OPTIM = {"name": "adamw", "lr": 2e-5, "min_lr": 0.0, "lr_schedule": "constant", "warmup_steps": 0,
               "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1, "clip_grad": 1.0}
DETOX_START = Start("gpt", named="smollm2-135m")  # the paper adapts a pretrained LM; a tiny GPT without it
DAPT_TRAIN = {"steps": 20, "micro_batch_size": 4, "global_batch_size": 8, "seq_length": 128, "eval_steps": 4,
              "eval_interval": 0, "save_interval": 0}


def tokenizer_digest(path: str) -> str:
    """What identifies a tokenizer: its file, or a directory's tokenizer files (not its weights)."""
    if os.path.isfile(path):
        return file_digest(path)
    names = [f for f in sorted(os.listdir(path))
             if any(k in f for k in ("tokenizer", "vocab", "merges", "spiece", "special_tokens"))]
    return digest({f: file_digest(os.path.join(path, f)) for f in names})


def held_out_corpus(tokenizer: str) -> str:
    """The bundled corpus as whole documents tokenized with ``tokenizer`` (cached): a ``.bin/.idx`` prefix."""
    corpus = corpus_file()
    key = digest({"corpus": file_digest(corpus), "tokenizer": tokenizer_digest(tokenizer)})[:16]

    def build(tmp: str) -> None:
        preprocess([corpus], os.path.join(tmp, "corpus"), tokenizer, json_keys=["text"], workers=1,
                   append_eod=True, progress=False)

    path, _ = cached_dir(os.path.join(cache_root(), "detox"), f"heldout-{key}", build,
                         "bundled corpus tokenized for held-out perplexity")
    return os.path.join(path, "corpus_text_document")


def rank_main(tree: dict, job: dict) -> None:
    """One rank: ``job`` has checkpoint, data (a .bin/.idx prefix), heldout, tokenizer, out."""
    r = driver.start_rank(tree)
    cfg, rank, world, device, say = r.cfg, r.rank, r.world, r.device, r.say
    t = cfg.train
    tok = load_tokenizer(job["tokenizer"])
    train, _, _ = build_datasets("gpt", [job["data"]], tok, t.seq_length, t.seed, "100,0,0",
                                 (t.steps * t.global_batch_size, 0, 0), cache_dir=cfg.data.cache_dir)
    _, valid, _ = build_datasets("gpt", [job["heldout"]], tok, t.seq_length, t.seed, HELD_OUT_SPLIT,
                                 (0, t.eval_steps * t.global_batch_size, 0), cache_dir=cfg.data.cache_dir)
    _, vocab, tensors, _ = full_state(job["checkpoint"])
    spec = GenerativeGPTSpec(cfg, vocab, None, tensors, job["checkpoint"])
    trainer = Trainer(cfg, spec, train, valid, world_size=world, device=device)
    del tensors
    if spec.missing:
        raise DataError(f"{job['checkpoint']} lacks {', '.join(spec.missing)}: not a whole GPT checkpoint")
    out = job["out"]
    before = trainer.evaluate(t.eval_steps)
    say(f"mwb: held-out perplexity before training {math.exp(before):.3f}", file=sys.stderr)
    logger = open_run(out, cfg, rank, world, extra={"dapt": job})
    driver.train(trainer, lambda tr, res, stop: logger.log_step(res))
    after = trainer.evaluate(t.eval_steps)
    logger.log_eval(trainer.step, {"loss": after, "ppl": math.exp(min(after, 50.0))})
    logger.close()
    path = checkpoint.save(trainer, os.path.join(out, "checkpoints"), extra_files={"tokenizer": job["tokenizer"]})
    if rank == 0:
        metrics = {"ppl_before": math.exp(min(before, 50.0)), "ppl": math.exp(min(after, 50.0)),
                   "loss_before": before, "loss": after, "steps": trainer.step,
                   "train_tokens": trainer.step * t.global_batch_size * t.seq_length}
        write_results(out, "detox", metrics, checkpoint=job["checkpoint"], config=dataclasses.asdict(cfg),
                      extra={"data": job["data"], "heldout": job["heldout"], "heldout_split": HELD_OUT_SPLIT,
                             "final_checkpoint": path})


def dapt_setup(checkpoint: Optional[str], configure: Configure, tokenizer: Optional[str], say: Say) -> Setup:
    """The start (``checkpoint``, else :data:`DETOX_START`) and config of domain-adaptive training, through the
    one fine-tuning setup path: the paper's optimizer and a short schedule, then ``configure`` (flags win)."""
    return finetune_setup("SGEAT domain-adaptive training", ("gpt",), DETOX_START, checkpoint, configure,
                          tokenizer, say, defaults={"optim": PAPER_OPTIM, "train": DAPT_TRAIN})


def run_dapt(setup: Setup, data_prefix: str, out: str, nproc: Optional[int] = None) -> dict:
    """Train ``setup``'s checkpoint on ``data_prefix``; returns ``OUT/results.json`` (first process)."""
    job = {"checkpoint": setup.checkpoint, "data": os.path.abspath(data_prefix),
           "heldout": held_out_corpus(setup.tokenizer), "tokenizer": setup.tokenizer, "out": out}
    run_job(setup.cfg, nproc, rank_main, lambda dims: (dataclasses.asdict(setup.cfg), job))
    if not first_process():
        return {}
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


def domain_adaptive_train(checkpoint_path: str, data_prefix: str, out: str, overrides: Optional[dict] = None,
                          nproc: Optional[int] = None, tokenizer: Optional[str] = None) -> dict:
    """Train ``checkpoint_path`` on ``data_prefix`` with config ``overrides`` (a tree) on the paper's defaults;
    returns ``OUT/results.json`` (first process)."""
    setup = dapt_setup(checkpoint_path, lambda base: update(base, overrides or {}), tokenizer, lambda m: None)
    return run_dapt(setup, data_prefix, out, nproc)
