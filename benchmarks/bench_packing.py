"""Tokens/s of generative fine-tuning with and without ``--pack``, on the chitchat dialogue data by default.

What it runs: the task's training samples exactly as ``mwb finetune TASK`` builds them (the task's reader, the
generative objective's GPT samples, the bundled tokenizer), then the real training step (``Trainer.train_step`` of
a GPT of ``--preset`` with random weights and the fine-tuning spec, loss on the targets only) on them twice: one
sample per row, and packed first-fit into rows of ``--seq-length`` + 1 tokens with per-document attention
(:mod:`mwb.core.data.packing`). Both take the same micro-batch of rows, so a packed step holds more samples. Each
run times ``--steps`` steps after ``--warmup`` steps.

Rows: padding (the share of input positions that hold no sample's token), tokens/s over all positions (what the
GPU computes on), non-padding tokens/s (the samples' own tokens: the number that compares), and the time an epoch
of the training samples takes at that rate. The ratio of the two non-padding rates is what ``--pack`` buys on
this data, this model and this machine.

    python benchmarks/bench_packing.py                                    # chitchat (mwb data fetch chitchat)
    python benchmarks/bench_packing.py --preset gpt-125m --seq-length 1024 --micro-batch-size 4 --steps 20
    python benchmarks/bench_packing.py --task prompt-target --steps 2 --warmup 1     # smoke run, bundled data
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from mwb.core.config import RunConfig, update  # noqa: E402
from mwb.core.data.packing import pack_samples  # noqa: E402
from mwb.core.presets import apply_preset  # noqa: E402
from mwb.core.tokenizers import load_tokenizer  # noqa: E402
from mwb.core.training.model_spec import GPTSpec, PaddingMetric  # noqa: E402
from mwb.core.training.trainer import Trainer  # noqa: E402
from mwb.tasks.api import generative_objective  # noqa: E402
from mwb.tasks.api.finetune import EpochShuffled  # noqa: E402
from mwb.tasks.api.packing import padding_share  # noqa: E402
from mwb.tasks.api.registry import get_task  # noqa: E402

TOKENIZER = os.path.join(os.path.dirname(__file__), "..", "mwb", "data", "corpus", "tokenizer.json")


class Spec(PaddingMetric, GPTSpec):
    """The fine-tuning spec's loss and padding metric, without a pretrained checkpoint to copy."""


def samples(args, tok) -> list[dict]:
    task = get_task(args.task)()
    data = task.data_path(args.data)
    task.prepare(data)
    examples = task.read(data, task.train_split)
    return generative_objective.featurize(task, examples, tok, args.seq_length, "gpt")


def timed(cfg: RunConfig, rows: list[dict], vocab: int, args, device) -> dict:
    """Median seconds per step after the warm-up, and the mean padding share of the timed steps."""
    trainer = Trainer(cfg, Spec(cfg, vocab), EpochShuffled(rows, cfg.train.seed), world_size=1, device=device)
    secs, pads = [], []
    for k in range(args.warmup + args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = trainer.train_step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if k >= args.warmup:
            secs.append(time.perf_counter() - t0)
            pads.append(res.extra["padding"])
    step = statistics.median(secs)
    positions = cfg.train.global_batch_size * cfg.train.seq_length
    padding = sum(pads) / len(pads)
    return {"step_s": step, "tokens_per_s": positions / step, "nonpad_tokens_per_s": positions * (1 - padding) / step,
            "padding": padding}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="dialogue", help="A generative task of the registry [dialogue].")
    ap.add_argument("--data", default=None, help="The task's data [its default: chitchat for dialogue].")
    ap.add_argument("--preset", default="gpt-tiny", help="Model shape (random weights) [gpt-tiny].")
    ap.add_argument("--seq-length", type=int, default=256)
    ap.add_argument("--micro-batch-size", type=int, default=8, help="Rows per step, packed or not [8].")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = load_tokenizer(TOKENIZER)
    unpacked = samples(args, tok)
    packed, info = pack_samples(unpacked, args.seq_length + 1)
    b = args.micro_batch_size
    cfg = update(apply_preset(RunConfig(), args.preset),
                 {"model": {"dropout": 0.0, "max_position_embeddings": max(args.seq_length, 256)},
                  "train": {"seq_length": args.seq_length, "micro_batch_size": b, "global_batch_size": b,
                            "steps": 10**6, "precision": args.precision},
                  "optim": {"lr": 1e-4, "warmup_steps": 0, "lr_schedule": "constant"},
                  "logging": {"tensorboard": False, "progress": False}})
    print(f"{args.task}: {len(unpacked):,} training samples; {info.rows:,} packed rows of {args.seq_length + 1} "
          f"tokens; padding {padding_share(unpacked):.1%} unpacked, {padding_share(packed):.1%} packed; "
          f"{args.preset}, {b} rows a step, {args.precision}, {device.type}, {torch.get_num_threads()} threads")
    rows = {}
    for name, data, cfg_ in (("unpacked", unpacked, cfg),
                             ("packed", packed, update(cfg, {"train": {"pack": True}}))):
        r = timed(cfg_, data, tok.vocab_size, args, device)
        epoch_tokens = sum(1 for _ in data) * args.seq_length * (1 - padding_share(data))
        rows[name] = r
        print(f"{name:9s} padding {r['padding']:6.1%}  step {r['step_s'] * 1e3:8.1f} ms  tokens/s "
              f"{r['tokens_per_s']:10,.0f}  non-padding tokens/s {r['nonpad_tokens_per_s']:10,.0f}  "
              f"epoch {epoch_tokens / r['nonpad_tokens_per_s']:8.1f} s")
    print(f"--pack: {rows['packed']['nonpad_tokens_per_s'] / rows['unpacked']['nonpad_tokens_per_s']:.2f}x "
          f"the non-padding tokens/s")


if __name__ == "__main__":
    main()
