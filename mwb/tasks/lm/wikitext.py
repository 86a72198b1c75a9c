"""WikiText-103 perplexity, zero-shot (Megatron's ``tasks/zeroshot_gpt``).

The file is detokenised (:mod:`mwb.evaluation.detokenizers`), tokenised as one stream and scored with a
sliding window of ``seq_length`` tokens that advances ``overlap`` tokens at a time (Megatron's
``--overlapping-eval``): every token after the first is scored exactly once, with up to ``seq_length``
tokens of context. Reported: token perplexity ``exp(Σnll / (T-1))`` over the T-1 predicted tokens and
Megatron's adjusted (word) perplexity ``exp(Σnll / (W-1))`` with W the whitespace-split words of the
original file — both exclude the first token/word, which is never predicted.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence


from mwb.core.errors import DataError
from mwb.evaluation.detokenizers import detokenizer_for
from mwb.evaluation.metrics import perplexity, word_perplexity
from mwb.evaluation.task_data import read_text
from mwb.evaluation.windows import rolling_windows, window_nll

from ..api.base import Option
from ..api.registry import register
from .common import LMTask

DATA = os.path.join(os.path.dirname(__file__), "bundled")


@register("wikitext", "wikitext103", "wikitext-103")
class WikiText(LMTask):
    description = "WikiText-103 perplexity (token and word-adjusted), sliding window, detokenised"
    default_data = os.path.join(DATA, "wiki_sample.tokens")
    options = {**LMTask.options,
               "overlap": Option(int, 32, low=1, help="Megatron's --overlapping-eval: new tokens scored per window; "
                                          "= seq_length for disjoint windows."),
               "detokenize": Option(bool, True, "Apply the WikiText detokenizer (by file name: wiki/ptb).")}

    def load(self, path: Optional[str]) -> list[dict]:
        path = self.data_path(path)
        return [{"text": read_text(path), "path": path}]

    def build(self, examples: list[dict], lm) -> list[dict]:
        raw = "".join(ex["text"] for ex in examples)
        path = examples[0]["path"] if examples else ""
        self.examples = examples
        self.num_words = len(raw.split())
        text = detokenizer_for(path)(raw) if self.opts["detokenize"] else raw
        ids = lm.encode(text)
        if len(ids) < 2 or self.num_words < 2:
            raise DataError(f"{path}: needs at least two words and two tokens to score")
        self.num_tokens = len(ids)
        seq = self.seq_length(lm)
        stride = min(self.opts["overlap"] or seq, seq)
        return [{"tokens": w, "skip": skip, "start": start} for start, w, skip in rolling_windows(ids, seq, stride)]

    def run(self, lm, items: Sequence[dict]) -> list[dict]:
        return [{"nll": nll, "num_tokens": count, "start": it["start"]}
                for it, nll, count in window_nll(lm, items, self.opts["batch_size"], self.pad_id(lm))]

    def aggregate(self, results: list[dict]) -> dict:
        nll = sum(r["nll"] for r in results)
        scored = sum(r["num_tokens"] for r in results)
        return {"perplexity": perplexity(nll, scored),
                "adjusted_perplexity": word_perplexity(nll, self.num_words - 1),
                "loss": nll / scored, "num_scored_tokens": scored, "num_tokens": self.num_tokens,
                "num_words": self.num_words, "token_ratio": (self.num_tokens - 1) / (self.num_words - 1)}

    def records(self, results: list[dict], examples: list[dict]) -> list[dict]:
        """Per sliding window: the summed NLL and count of the tokens it scores, as the parts of ``perplexity``
        and ``loss`` (every token is scored in exactly one window, so the parts add up to the corpus numbers).
        ``adjusted_perplexity`` divides by words of the whole file, which no window owns, so it has no
        per-item parts. Id: the file name and the window's first token position."""
        name = os.path.basename(examples[0]["path"]) if examples else "text"
        out = []
        for r in results:
            parts = {"nll": r["nll"], "tokens": r["num_tokens"]}
            out.append({"id": f"{name}@{r['start']}", "prediction": None, "gold": None,
                        "perplexity": parts, "loss": parts})
        return out
