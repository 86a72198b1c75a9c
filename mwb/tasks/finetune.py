"""``mwb finetune TASK``: a pretrained encoder + task head, trained by the shared trainer.

Everything pretraining has applies (TP/SP/DP, precision, accumulation, checkpoints, resume, progress,
metrics.jsonl); on top, the dev split is evaluated after every epoch, each epoch's checkpoint is saved,
the best one by the task metric is recorded (``OUT/checkpoints/best``), and ``OUT/results.json`` holds the
best dev metrics and the path of the best checkpoint, which ``mwb eval TASK --checkpoint`` reproduces.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Optional

import numpy as np
import torch

from mwb.core.config import RunConfig, update
from mwb.core.training.spec import ModelSpec

from .base import get_finetune_task
from .model import build_task_model, load_weights, predict


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


class FinetuneSpec(ModelSpec):
    arch = "bert"

    def __init__(self, cfg: RunConfig, vocab_size: int, task, tensors: Optional[dict], source: str) -> None:
        super().__init__(cfg, vocab_size)
        self.task, self.tensors, self.source = task, tensors, source
        self.missing: list[str] = []

    def build_chunk(self, state, stage, device, dtype):
        model = build_task_model(self.cfg.model, state, self.vocab_size, self.task.head, self.task.num_labels,
                                 self.cfg.train.seed, device, dtype)
        if self.tensors is not None:
            self.missing = load_weights(model, self.tensors, self.vocab_size, self.source, encoder_only=True)
        return model

    def forward(self, model, batch, hidden=None):
        return model(batch["tokens"], batch.get("types"), batch.get("padding_mask"), labels=batch["label"])

    def tokens_in(self, batch):
        return batch["tokens"].numel()

    def nominal_count(self, micro_batch: int, seq_length: int) -> float:
        return float(micro_batch)


def featurize_all(task, examples: list[dict], tokenizer, seq_length: int) -> list[dict]:
    return [task.featurize(e, tokenizer, seq_length) for e in examples]


def rank_main(tree: dict, job: dict) -> None:
    """One rank of a fine-tuning run (``job``: task, data, checkpoint, out, epochs, tokenizer, vocab)."""
    from mwb.core import checkpoint
    from mwb.core.checkpoint.consolidate import full_state
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.training.launch import init_distributed
    from mwb.core.training.metrics_log import MetricsLogger
    from mwb.core.training.trainer import Trainer
    from mwb.core.config import dump_yaml
    from mwb.evaluation.results import write_results

    cfg = update(RunConfig(), tree)
    rank, world, device = init_distributed(cfg.parallel.timeout_s)
    say = print if rank == 0 else (lambda *a, **k: None)
    task = get_finetune_task(job["task"])
    tok = load_tokenizer(job["tokenizer"])
    seq = cfg.train.seq_length
    train_ex = task.read(job["data"], "train")
    dev_ex = task.read(job["data"], "dev")
    train_f = featurize_all(task, train_ex, tok, seq)
    dev_f = featurize_all(task, dev_ex, tok, seq)
    _, vocab, tensors, _ = full_state(job["checkpoint"])
    spec = FinetuneSpec(cfg, vocab, task, tensors, job["checkpoint"])
    trainer = Trainer(cfg, spec, EpochShuffled(train_f, cfg.train.seed), None, world_size=world, device=device)
    if spec.missing:
        say(f"mwb: not in the pretrained checkpoint, trained from scratch: {', '.join(spec.missing)}",
            file=sys.stderr)
    out, ckpt_root = job["out"], os.path.join(job["out"], "checkpoints")
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        dump_yaml(cfg, os.path.join(out, "config.yaml"), extra={"task": {**job, "train_examples": len(train_ex),
                                                                          "dev_examples": len(dev_ex)}})
    start = checkpoint.load(trainer, checkpoint.latest_dir(ckpt_root)) if job.get("resume") and \
        checkpoint.latest_dir(ckpt_root) else 0
    logger = MetricsLogger(out, cfg.train.steps, enabled=rank == 0, tensorboard=cfg.logging.tensorboard,
                           progress=cfg.logging.progress, world_size=world, start_step=start,
                           log_interval=cfg.logging.log_interval)
    steps_per_epoch = job["steps_per_epoch"]
    history: list[dict] = []
    best = {"value": -float("inf"), "step": None}
    trainer.install_signal_handlers()

    def after_step(tr, res, stop):
        logger.log_step(res)
        end_of_epoch = res.step % steps_per_epoch == 0 or res.step == cfg.train.steps
        if end_of_epoch:
            preds = predict(tr.chunks[0], dev_f, cfg.train.micro_batch_size, tr.device)
            metrics = task.metrics(preds, dev_ex)
            metrics["epoch"] = -(-res.step // steps_per_epoch)
            logger.log_eval(res.step, metrics)
            history.append({"step": res.step, **metrics})
            path = checkpoint.save(tr, ckpt_root, keep_last=0, extra_files={"tokenizer": job["tokenizer"]})
            if metrics[task.metric] > best["value"]:
                best.update(value=metrics[task.metric], step=res.step, path=path, metrics=metrics)
                if rank == 0:
                    with open(os.path.join(ckpt_root, "best.partial"), "w") as f:
                        f.write(f"step_{res.step}\n")
                    os.replace(os.path.join(ckpt_root, "best.partial"), os.path.join(ckpt_root, "best"))
        elif stop:
            checkpoint.save(tr, ckpt_root, extra_files={"tokenizer": job["tokenizer"]})

    trainer.run(after_step)
    logger.close()
    if rank == 0 and best["step"] is not None:
        shown = {k: v for k, v in best["metrics"].items()}
        path = write_results(out, task.name, shown, checkpoint=job["checkpoint"], config=dataclasses.asdict(cfg),
                             extra={"best_checkpoint": best["path"], "epochs": history, "split": "dev"})
        say("mwb: dev " + "  ".join(f"{k} {v:.4f}" for k, v in shown.items() if k.startswith("accuracy")
                                    or k == task.metric))
        say(f"mwb: best checkpoint {best['path']} (epoch {shown.get('epoch')})")
        say(f"mwb: results         {path}")
        say(f"mwb: run directory   {os.path.abspath(out)}")


def finetune(task_name: str, cfg: RunConfig, job: dict, nproc: Optional[int]) -> None:
    """Resolve steps from the epochs and the training-set size, then run :func:`rank_main` on each rank."""
    from mwb.core.training.job import run_job

    task = get_finetune_task(task_name)
    n_train = len(task.read(job["data"], "train"))
    gbs = cfg.train.global_batch_size
    if n_train < gbs:
        gbs = max(cfg.train.micro_batch_size, n_train // cfg.train.micro_batch_size * cfg.train.micro_batch_size)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, global_batch_size=gbs))
    steps_per_epoch = max(n_train // gbs, 1)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=steps_per_epoch * job["epochs"]))
    job = dict(job, steps_per_epoch=steps_per_epoch)
    run_job(cfg, nproc, rank_main, lambda dims: (dataclasses.asdict(cfg), job),
            resume=os.path.join(job["out"], "checkpoints") if job.get("resume") else None)


def set_threads_for_tests(n: int = 1) -> None:  # pragma: no cover - used by spawned test ranks
    torch.set_num_threads(n)
