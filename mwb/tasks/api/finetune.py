"""``mwb finetune TASK``: any trainable task (encoder head or generative target) on the shared trainer.

Everything pretraining has applies (TP/SP/PP/DP, the distributed optimizer, precision, accumulation,
checkpoints, resume, progress, metrics.jsonl). On top, after every epoch the dev split is evaluated and a
checkpoint saved; the best one is recorded in ``OUT/checkpoints/best`` and ``OUT/results.json`` holds its
dev metrics; ``--keep-last K`` keeps the newest K epoch checkpoints and the best one. Encoder tasks are
scored with the task's own metrics on the model being trained; generative tasks by their dev target-token
loss during training, then — once, after training, in the launching process — by greedy generations of the
best checkpoint through the evaluation harness (what ``mwb eval TASK --checkpoint OUT`` reproduces).
``OUT/predictions.jsonl`` beside ``results.json`` holds the per-item records of those dev metrics
(:meth:`~mwb.tasks.api.base.Task.records`): the best epoch's dev predictions, or the greedy generations'.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Optional

import numpy as np

from mwb.core.compose import full_state
from mwb.core.atomic import atomic_write_text
from mwb.core.config import RunConfig
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.job import first_process, run_job
from mwb.core.training import driver
from mwb.core.training.run_dir import open_run
from mwb.core.training.trainer import Trainer
from mwb.evaluation.predictions import write_predictions
from mwb.evaluation.results import write_results

from . import packing
from .epoch_evaluation import EpochEvaluation
from .evaluate import evaluate_checkpoint
from .registry import get_task

class EpochShuffled:
    """Sample ``i`` of an endless stream over ``features``: a fresh seeded permutation every epoch."""

    def __init__(self, features: list[dict], seed: int) -> None:
        self.features, self.seed = features, seed
        self._perms: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return 10**12

    def __getitem__(self, i: int) -> dict:
        n = len(self.features)
        epoch = i // n
        if epoch not in self._perms:
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(n)
        return self.features[int(self._perms[epoch][i % n])]


def rank_main(tree: dict, job: dict) -> None:
    """One rank of a fine-tuning run (``job``: task, task_opts, data, checkpoint, out, tokenizer, resume)."""
    r = driver.start_rank(tree)
    cfg, rank, world, device, say = r.cfg, r.rank, r.world, r.device, r.say
    task = get_task(job["task"])(**job["task_opts"])
    obj = task.objective
    tok = load_tokenizer(job["tokenizer"])
    seq = cfg.train.seq_length
    task.prepare(job["data"])
    train_ex = task.read(job["data"], task.train_split)
    dev_ex = task.read(job["data"], task.eval_split)
    train_f, dev_f = obj.featurize(task, train_ex, dev_ex, tok, seq, cfg.model.arch)
    if cfg.train.pack:  # --pack: samples share rows, each attending only to itself (.packing)
        train_f, dev_f = packing.pack_splits(train_f, dev_f, cfg, say, job["out"] if rank == 0 else None)
    _, vocab, tensors, _ = full_state(job["checkpoint"])
    spec = obj.make_spec(task, cfg, vocab, tensors, job["checkpoint"])
    trainer = Trainer(cfg, spec, EpochShuffled(train_f, cfg.train.seed), dev_f, world_size=world, device=device)
    if spec.missing:
        say(f"mwb: not in the pretrained checkpoint, trained from scratch: {', '.join(spec.missing)}",
            file=sys.stderr)
    out, ckpt_root = job["out"], os.path.join(job["out"], "checkpoints")
    start, _ = driver.resume_latest(trainer, ckpt_root, bool(job.get("resume")), driver.silent)
    logger = open_run(out, cfg, rank, world, start_step=start,
                      extra={"task": {**job, "train_examples": len(train_ex), "dev_examples": len(dev_ex)}})
    dev_steps = max(1, len(dev_f) // cfg.train.global_batch_size)
    epochs = EpochEvaluation(cfg, out, rank, obj.dev_metric(task), job["steps_per_epoch"],
                             lambda tr: obj.epoch_metrics(task, tr, dev_f, dev_ex, dev_steps), logger,
                             job["tokenizer"], start)
    driver.train(trainer, epochs)
    logger.close()
    best = epochs.best
    if rank == 0 and best["step"] is not None:
        write_results(out, task.name, best["metrics"], checkpoint=job["checkpoint"],
                      config=dataclasses.asdict(cfg),
                      extra={"best_checkpoint": best["path"], "epochs": epochs.history, "split": task.eval_split,
                             "objective": task.objective.name, "start": job.get("start")})


def plan_steps(task, cfg: RunConfig, data: str, epochs: int,
               n_train: Optional[int] = None) -> tuple[RunConfig, int]:
    """Steps from the epochs and the training-set size (a set smaller than the global batch shrinks it).

    The size is the number of training *examples* ``read`` returns — questions for SQuAD, not the doc-stride
    windows they become (as Google's BERT ``run_squad.py`` counts ``num_train_steps``); the sample stream
    still goes through every window, in a fresh order each pass."""
    n_train = len(task.read(data, task.train_split)) if n_train is None else n_train  # --pack: packed rows
    gbs = cfg.train.global_batch_size
    if n_train < gbs:
        gbs = max(cfg.train.micro_batch_size, n_train // cfg.train.micro_batch_size * cfg.train.micro_batch_size)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, global_batch_size=gbs))
    steps_per_epoch = max(n_train // gbs, 1)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=steps_per_epoch * epochs)), \
        steps_per_epoch


def finetune(task_name: str, cfg: RunConfig, job: dict, nproc: Optional[int]) -> dict:
    """Run :func:`rank_main` on each rank; for generative tasks, score the best checkpoint's generations.
    Returns the results that ``OUT/results.json`` holds."""
    task = get_task(task_name)(**job.get("task_opts", {}))
    rows = packing.train_rows(task, cfg, job) if cfg.train.pack else None
    cfg, steps_per_epoch = plan_steps(task, cfg, job["data"], job["epochs"], rows)
    job = dict(job, steps_per_epoch=steps_per_epoch, task_opts=job.get("task_opts", {}))
    run_job(cfg, nproc, rank_main, lambda dims: (dataclasses.asdict(cfg), job),
            resume=os.path.join(job["out"], "checkpoints") if job.get("resume") else None)
    results_path = os.path.join(job["out"], "results.json")
    if not first_process() or not os.path.isfile(results_path):
        return {}
    with open(results_path) as f:
        results = json.load(f)
    if task.objective.scored_after_training:  # the task's own metrics on greedy generations of the best checkpoint
        report = evaluate_checkpoint(task, results["best_checkpoint"], job["data"], tokenizer=job["tokenizer"])
        results["metrics"].update(report["metrics"])
        write_predictions(job["out"], report["records"])  # the greedy generations' records
        write_results(job["out"], task.name, results["metrics"], checkpoint=job["checkpoint"],
                      config=results.get("config"),
                      extra={**{k: v for k, v in results.items() if k not in ("task", "metrics", "checkpoint",
                                                                             "config", "time", "mwb", "torch")},
                             **report["extra"]})
        for name, text in task.files(report["metrics"], report["records"], report["examples"]).items():  # e.g. the generations, next to results.json
            atomic_write_text(os.path.join(job["out"], name), text)
    return results
