"""Zero-shot GPT evaluation: LAMBADA last-word accuracy and WikiText perplexity (Megatron's
``tasks/zeroshot_gpt``), as harness tasks.

LAMBADA: each example is a passage whose last whitespace-delimited word is the target. The model is
correct when its greedy (argmax) prediction matches *every* token of that word given the passage before it
— teacher forcing and greedy decoding agree exactly when all argmaxes match. Default mode tokenises the
whole passage once and takes as target the trailing tokens that spell the last word; ``--strict`` is
Megatron's ``--strict-lambada``: the passage is split at the last word, the context (stripped) and
``" " + word`` are tokenised separately, so the target is always a whole word however BPE merges.

WikiText: the file is detokenised (:mod:`.detokenizers`), tokenised as one stream and scored with a
sliding window of ``seq_length`` tokens that advances ``overlap`` tokens at a time (Megatron's
``--overlapping-eval``): every token after the first is scored exactly once, with up to ``seq_length``
tokens of context. Reported: token perplexity ``exp(Σnll / (T-1))`` over the T-1 predicted tokens and
Megatron's adjusted (word) perplexity ``exp(Σnll / (W-1))`` with W the whitespace-split words of the
original file — both exclude the first token/word, which is never predicted.
"""
from __future__ import annotations

import os
from typing import Iterator, Optional, Sequence

import torch

from mwb.core.config import ConfigError
from mwb.core.errors import DataError

from .detokenizers import detokenizer_for
from .metrics import perplexity, word_perplexity
from .registry import register_task
from .task import DATA_DIR, Option, Task, read_text


def rolling_windows(ids: Sequence[int], seq_length: int, stride: int) -> Iterator[tuple[int, list[int], int]]:
    """``(start, window, skip)`` covering ``ids``: ``window = ids[start : start+seq_length+1]`` (inputs are
    ``window[:-1]``, targets ``window[1:]``) and the first ``skip`` targets were scored by an earlier window.

    Windows start at ``0, stride, 2·stride, …``; the union of the unskipped targets is positions 1..N-1,
    each exactly once, so ``stride`` ≤ ``seq_length`` is required."""
    if not 1 <= stride <= seq_length:
        raise ConfigError(f"overlap/stride must be between 1 and seq_length ({seq_length}), got {stride}")
    n, start, scored = len(ids), 0, 0  # positions 1..scored are done
    while scored < n - 1:
        end = min(start + seq_length, n - 1)  # last position this window predicts
        yield start, list(ids[start:end + 1]), scored - start
        scored = end
        start += stride


def _padded(rows: Sequence[Sequence[int]], pad: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class _LMTask(Task):
    """Shared options: context length and batch size, filled from the model when not given."""

    options = {
        "seq_length": Option(int, None, "Tokens of context per forward pass (default: the model's maximum)."),
        "batch_size": Option(int, 8, "Sequences per forward pass."),
    }

    def seq_length(self, lm) -> int:
        n = self.opts.get("seq_length") or min(lm.max_length, 1024)
        if n > lm.max_length:
            raise ConfigError(f"--seq-length {n} exceeds the model's {lm.max_length} positions")
        return n

    @staticmethod
    def pad_id(lm) -> int:
        return lm.eod if lm.eod is not None else 0


@register_task("lambada")
class Lambada(_LMTask):
    description = "LAMBADA last-word accuracy (greedy, all tokens of the last word); --strict for whole words"
    default_data = os.path.join(DATA_DIR, "lambada_sample.jsonl")
    options = {**_LMTask.options,
               "strict": Option(bool, False, "Megatron's --strict-lambada: tokenise context and ' word' apart.")}

    def load(self, path: Optional[str]) -> list[dict]:
        rows = super().load(path)
        if rows and "text" not in rows[0]:
            raise DataError(f"{self.data_path(path)}: LAMBADA rows need a 'text' field (official jsonl format)")
        return rows

    def split(self, text: str, lm) -> tuple[list[int], list[int]]:
        """(context ids, target ids) for one passage."""
        words = text.split()
        if not words:
            raise DataError("an empty LAMBADA passage")
        word = words[-1]
        start = text.rstrip().rfind(word)
        if self.opts["strict"]:
            return lm.encode(text[:start].strip()), lm.encode(" " + word)
        ids = lm.encode(text)
        # the fewest trailing tokens whose removal leaves no character of the last word
        for k in range(1, len(ids) + 1):
            if len(lm.decode(ids[:-k]).rstrip()) <= start:
                return ids[:-k], ids[-k:]
        return [], ids

    def build(self, examples: list[dict], lm) -> list[dict]:
        limit = self.seq_length(lm) + 1  # inputs are all tokens but the last
        items = []
        for ex in examples:
            ctx, tgt = self.split(ex["text"], lm)
            if not ctx:
                if lm.eod is None:
                    raise DataError(f"LAMBADA passage {ex['text'][:40]!r} has no context and the tokenizer "
                                    f"has no end-of-document token to stand in for one")
                ctx = [lm.eod]
            if len(tgt) >= limit:
                raise DataError(f"LAMBADA target of {len(tgt)} tokens does not fit --seq-length {limit - 1}")
            items.append({"context": ctx[-(limit - len(tgt)):], "target": tgt})
        return items

    @torch.no_grad()
    def run(self, lm, items: Sequence[dict]) -> list[dict]:
        out = []
        for batch in _batches(items, self.opts["batch_size"]):
            rows = [it["context"] + it["target"][:-1] for it in batch]
            logp = lm.log_probs(_padded(rows, self.pad_id(lm)))
            for b, it in enumerate(batch):
                c, t = len(it["context"]), it["target"]
                lp = logp[b, c - 1:c - 1 + len(t)]
                tgt = torch.tensor(t, device=lp.device)
                correct = bool((lp.argmax(-1) == tgt).all())
                nll = -float(lp.gather(-1, tgt[:, None]).sum())
                out.append({"correct": correct, "nll": nll, "num_tokens": len(t)})
        return out

    def aggregate(self, results: list[dict]) -> dict:
        n = len(results)
        tokens = sum(r["num_tokens"] for r in results)
        nll = sum(r["nll"] for r in results)
        return {"accuracy": sum(r["correct"] for r in results) / max(n, 1),
                "target_perplexity": perplexity(nll, tokens) if tokens else float("nan"),
                "num_examples": n}


@register_task("wikitext", "wikitext103", "wikitext-103")
class WikiText(_LMTask):
    description = "WikiText-103 perplexity (token and word-adjusted), sliding window, detokenised"
    default_data = os.path.join(DATA_DIR, "wiki_sample.tokens")
    options = {**_LMTask.options,
               "overlap": Option(int, 32, "Megatron's --overlapping-eval: new tokens scored per window; "
                                          "= seq_length for disjoint windows."),
               "detokenize": Option(bool, True, "Apply the WikiText detokenizer (by file name: wiki/ptb).")}

    def load(self, path: Optional[str]) -> list[dict]:
        path = self.data_path(path)
        return [{"text": read_text(path), "path": path}]

    def build(self, examples: list[dict], lm) -> list[dict]:
        raw = "".join(ex["text"] for ex in examples)
        path = examples[0]["path"] if examples else ""
        self.num_words = len(raw.split())
        text = detokenizer_for(path)(raw) if self.opts["detokenize"] else raw
        ids = lm.encode(text)
        if len(ids) < 2 or self.num_words < 2:
            raise DataError(f"{path}: needs at least two words and two tokens to score")
        self.num_tokens = len(ids)
        seq = self.seq_length(lm)
        stride = min(self.opts["overlap"] or seq, seq)
        return [{"tokens": w, "skip": skip} for _, w, skip in rolling_windows(ids, seq, stride)]

    @torch.no_grad()
    def run(self, lm, items: Sequence[dict]) -> list[dict]:
        out = []
        for batch in _batches(items, self.opts["batch_size"]):
            logp = lm.log_probs(_padded([it["tokens"][:-1] for it in batch], self.pad_id(lm)))
            for b, it in enumerate(batch):
                n = len(it["tokens"]) - 1
                tgt = torch.tensor(it["tokens"][1:], device=logp.device)
                lp = logp[b, :n].gather(-1, tgt[:, None])[:, 0][it["skip"]:]
                out.append({"nll": -float(lp.double().sum()), "num_tokens": int(lp.numel())})
        return out

    def aggregate(self, results: list[dict]) -> dict:
        nll = sum(r["nll"] for r in results)
        scored = sum(r["num_tokens"] for r in results)
        return {"perplexity": perplexity(nll, scored),
                "adjusted_perplexity": word_perplexity(nll, self.num_words - 1),
                "loss": nll / scored, "num_scored_tokens": scored, "num_tokens": self.num_tokens,
                "num_words": self.num_words, "token_ratio": (self.num_tokens - 1) / (self.num_words - 1)}
