"""What a fine-tuning task is: data → examples → features, a head, a metric.

A new task is one small module: subclass :class:`FinetuneTask`, set ``name``/``head``/``num_labels`` and
``default_data``, implement ``read`` (examples of a split) and ``featurize`` (model inputs of one example),
and ``metrics`` (from predictions), then decorate it with ``@register_finetune``. Training, parallelism,
checkpoints, per-epoch evaluation, the best checkpoint and ``results.json`` come from
:mod:`mwb.tasks.finetune`; ``mwb eval TASK`` reuses the same task through :mod:`mwb.tasks.harness`.
"""
from __future__ import annotations

from typing import ClassVar, Optional

import numpy as np

from mwb.core.config import ConfigError

FINETUNE_TASKS: dict[str, type] = {}
TASK_MODULES = ("race",)  # modules under mwb.tasks whose import registers fine-tuning tasks


def register_finetune(cls):
    FINETUNE_TASKS[cls.name] = cls
    return cls


def discover() -> dict[str, type]:
    import importlib
    for mod in TASK_MODULES:
        importlib.import_module(f"mwb.tasks.{mod}")
    return FINETUNE_TASKS


def get_finetune_task(name: str) -> "FinetuneTask":
    discover()
    if name not in FINETUNE_TASKS:
        raise ConfigError(f"unknown fine-tuning task '{name}' (known: {', '.join(sorted(FINETUNE_TASKS))})")
    return FINETUNE_TASKS[name]()


class FinetuneTask:
    name: ClassVar[str] = "task"
    head: ClassVar[str] = "classification"
    num_labels: ClassVar[int] = 2
    metric: ClassVar[str] = "accuracy"  # the metric that picks the best checkpoint
    default_data: ClassVar[Optional[str]] = None
    splits: ClassVar[tuple[str, ...]] = ("train", "dev", "test")

    def read(self, path: str, split: str) -> list[dict]:
        raise NotImplementedError

    def featurize(self, example: dict, tokenizer, seq_length: int) -> dict:
        """Model inputs for one example: numpy arrays ``tokens``, ``types``, ``padding_mask``, ``label``."""
        raise NotImplementedError

    def metrics(self, preds: list, examples: list[dict]) -> dict[str, float]:
        raise NotImplementedError


def pair_inputs(a: list[int], b: list[int], tokenizer, seq_length: int, truncate: str = "a") -> dict:
    """``[CLS] a [SEP] b [SEP]`` with token types 0/1 and padding, BERT's sentence-pair layout.

    ``truncate='a'`` shortens the first segment (the passage) so the second (question + option) stays whole,
    as Megatron's RACE builder does."""
    tokenizer.require("cls", "sep", "pad", purpose="sentence-pair inputs")
    room = seq_length - 3
    if len(a) + len(b) > room:
        if truncate == "a":
            a = a[: max(room - len(b), 0)]
            b = b[:room]
        else:
            b = b[: max(room - len(a), 0)]
            a = a[:room]
    ids = [tokenizer.cls] + a + [tokenizer.sep] + b + [tokenizer.sep]
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    pad = seq_length - len(ids)
    return {"tokens": np.array(ids + [tokenizer.pad] * pad, dtype=np.int64),
            "types": np.array(types + [0] * pad, dtype=np.int64),
            "padding_mask": np.array([1] * len(ids) + [0] * pad, dtype=np.int64)}
