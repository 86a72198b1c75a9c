"""LAMBADA last-word accuracy, zero-shot (Megatron's ``tasks/zeroshot_gpt``).

Each example is a passage whose last whitespace-delimited word is the target. The model is
correct when its greedy (argmax) prediction matches *every* token of that word given the passage before it
— teacher forcing and greedy decoding agree exactly when all argmaxes match. Default mode tokenises the
whole passage once and takes as target the trailing tokens that spell the last word; ``--strict`` is
Megatron's ``--strict-lambada``: the passage is split at the last word, the context (stripped) and
``" " + word`` are tokenised separately, so the target is always a whole word however BPE merges.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import torch

from mwb.core.errors import DataError
from mwb.evaluation.metrics import perplexity
from mwb.evaluation.task_data import load_records
from mwb.evaluation.windows import batches, padded

from ..api.base import Option
from ..api.formats.checks import text
from ..api.records import example_ids
from ..api.registry import register
from .common import LMTask

DATA = os.path.join(os.path.dirname(__file__), "bundled")


@register("lambada")
class Lambada(LMTask):
    description = "LAMBADA last-word accuracy (greedy, all tokens of the last word); --strict for whole words"
    default_data = os.path.join(DATA, "lambada_sample.jsonl")
    options = {**LMTask.options,
               "strict": Option(bool, False, "Megatron's --strict-lambada: tokenise context and ' word' apart.")}

    def load(self, path: Optional[str]) -> list[dict]:
        f = self.data_path(path)
        rows = load_records(f)  # an empty file is a DataError there
        for n, row in enumerate(rows, 1):  # the official jsonl: {"text": passage}, its last word the target
            text(row, "text", f"{f}: row {n}", empty=False)
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
        self.examples = examples
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
        for batch in batches(items, self.opts["batch_size"]):
            rows = [it["context"] + it["target"][:-1] for it in batch]
            logp = lm.log_probs(padded(rows, self.pad_id(lm)))
            for b, it in enumerate(batch):
                c, t = len(it["context"]), it["target"]
                lp = logp[b, c - 1:c - 1 + len(t)]
                tgt = torch.tensor(t, device=lp.device)
                guess = lp.argmax(-1)
                correct = bool((guess == tgt).all())
                nll = -float(lp.gather(-1, tgt[:, None]).sum())
                out.append({"correct": correct, "nll": nll, "num_tokens": len(t),
                            "prediction": lm.decode(guess.tolist()), "gold": lm.decode(t)})
        return out

    def aggregate(self, results: list[dict]) -> dict:
        n = len(results)
        tokens = sum(r["num_tokens"] for r in results)
        nll = sum(r["nll"] for r in results)
        return {"accuracy": sum(r["correct"] for r in results) / max(n, 1),
                "target_perplexity": perplexity(nll, tokens) if tokens else float("nan"),
                "num_examples": n}

    def records(self, results: list[dict], examples: list[dict]) -> list[dict]:
        """Per passage: ``accuracy`` 0/1 (all target tokens argmax-correct) and ``target_perplexity``'s parts
        (the target's summed NLL and token count); ``prediction`` is the greedy guess for the target tokens.
        Id: a hash of the passage (LAMBADA rows have no id of their own)."""
        ids = example_ids(examples, key=None)
        return [{"id": i, "prediction": r["prediction"], "gold": r["gold"], "accuracy": int(r["correct"]),
                 "target_perplexity": {"nll": r["nll"], "tokens": r["num_tokens"]}} for i, r in zip(ids, results)]
