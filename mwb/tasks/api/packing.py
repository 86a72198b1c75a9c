"""``mwb finetune TASK --pack``: generative fine-tuning on packed rows (:mod:`mwb.core.data.packing`).

Why: a prompt → target sample or a short conversation fills a small part of its ``seq_length + 1`` row; the rest
is padding the model computes on for nothing. With ``--pack`` the training samples are packed first-fit into
rows, once, in data order (each epoch shuffles the rows), every sample attending only to itself with its positions
restarting, so each sample's token losses are the ones it has alone. What changes is the number of rows: an
epoch is ⌊rows / global batch⌋ steps, and ``--global-batch-size`` counts rows.

What stays: the loss of a step is the mean over the target tokens of its global batch, packed or not. The dev loss
covers the same samples as without ``--pack`` (the first ⌊dev / G⌋·G of them, G the global batch), packed and
topped up with empty rows to whole global batches, so at ``--lr 0`` the two dev losses are the same number.

The run says what packing saved (a line on stderr and ``OUT/packing.json``: samples, rows and the padding share
of the input positions, unpacked and packed); every step of a generative fine-tuning run, packed or not, logs its
``padding`` share and ``nonpad_tokens_per_s`` to metrics.jsonl, so two runs compare at a glance.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional

from mwb.core.config import ConfigError, RunConfig
from mwb.core.data.packing import empty_row, pack_samples
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.batches import collate
from mwb.core.training.model_spec import document_tokens

from . import generative_objective


def check(task, cfg: RunConfig) -> None:
    """A ConfigError unless ``--pack`` applies: a generative task, a GPT, no context parallelism."""
    if not task.objective.packs:
        raise ConfigError(f"--pack packs the samples of generative fine-tuning; task '{task.name}' is "
                          f"{task.objective}")
    if cfg.model.arch != "gpt":
        raise ConfigError(f"--pack packs GPT samples; this checkpoint holds a '{cfg.model.arch}' model")
    if cfg.parallel.cp > 1:
        raise ConfigError("--pack does not run under context parallelism; use --cp 1")


def train_rows(task, cfg: RunConfig, job: dict) -> int:
    """The number of packed training rows (the launching process plans the epochs with it, before the ranks
    featurise and pack the same samples the same way)."""
    check(task, cfg)
    task.prepare(job["data"])
    examples = task.read(job["data"], task.train_split)
    features = generative_objective.featurize(task, examples, load_tokenizer(job["tokenizer"]),
                                              cfg.train.seq_length, cfg.model.arch)
    return pack_samples(features, cfg.train.seq_length + 1)[1].rows


def padding_share(rows: list[dict]) -> float:
    """The share of input positions of ``rows`` that hold no sample's token (the metric the spec logs)."""
    if not rows:
        return 0.0
    real, total = document_tokens(collate(rows))
    return 1.0 - float(real) / max(float(total), 1.0)


def pack_splits(train: list[dict], dev: list[dict], cfg: RunConfig, say=print,
                out: Optional[str] = None) -> tuple[list[dict], list[dict]]:
    """Packed training rows, and packed dev rows that cover what the unpacked dev loss covers (module docstring).
    Says what packing saved; with ``out``, writes it to ``out/packing.json``."""
    capacity, gbs = cfg.train.seq_length + 1, cfg.train.global_batch_size
    train_rows_, train_info = pack_samples(train, capacity)
    evaluated = [dev[i % len(dev)] for i in range(max(1, len(dev) // gbs) * gbs)] if dev else []
    dev_rows, dev_info = pack_samples(evaluated, capacity)
    filler = -len(dev_rows) % gbs
    dev_rows += [empty_row(capacity) for _ in range(filler)]
    report = {"capacity": capacity,
              "train": {"samples": len(train), "rows": train_info.rows, "empty_samples": train_info.empty,
                        "padding_unpacked": padding_share(train), "padding_packed": padding_share(train_rows_)},
              "dev": {"samples": len(evaluated), "rows": len(dev_rows), "empty_rows": filler,
                      "padding_unpacked": padding_share(evaluated), "padding_packed": padding_share(dev_rows)}}
    t = report["train"]
    say(f"mwb: --pack: {t['samples']:,} training samples in {t['rows']:,} rows of {capacity} tokens "
        f"({1 - t['rows'] / max(t['samples'], 1):.0%} fewer rows); padding {t['padding_unpacked']:.1%} of input "
        f"positions unpacked, {t['padding_packed']:.1%} packed; dev: {len(evaluated):,} samples in "
        f"{len(dev_rows):,} rows", file=sys.stderr)
    if out is not None:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "packing.json"), "w") as f:
            json.dump(report, f, indent=1)
    return train_rows_, dev_rows
