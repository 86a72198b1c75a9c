"""``mwb finetune dialogue --reply-ppl``: the perplexity of every evaluated gold reply under the evaluated GPT.

Why per reply: the dev loss during fine-tuning is one number per run, so two runs (with and without actor
references, ``mwb repro multi-actor``) cannot be paired item by item; the summed NLL and token count of each gold
reply can, and their ratio over all replies (exp of summed NLL over summed tokens) is the corpus perplexity.
The reply is scored with its closing end-of-document, the tokens fine-tuning's loss covers.
"""
from __future__ import annotations

import math

from mwb.core.config import ConfigError


def reply_nll(lm, prompt: list[int], reply: list[int]) -> dict:
    """``{"nll", "tokens"}``: the summed negative log-likelihood (nats) of the gold ``reply`` ids (its tokens and
    the closing end-of-document, the tokens fine-tuning's loss covers) given the ``prompt`` ids; a prompt too
    long for the model's context (``max_length`` inputs predicting ``max_length`` targets) loses its beginning, as
    in training (:func:`~mwb.tasks.api.generative_objective.gpt_sample`)."""
    room = max(lm.max_length + 1 - len(reply), 1)
    ids = list(prompt)[-room:] + list(reply)
    return {"nll": -float(sum(lm.token_logprobs(ids)[len(ids) - len(reply):])), "tokens": len(reply)}


def split_results(results: list) -> tuple[list[str], object]:
    """``run``'s results as (replies, [(nll, tokens)] or None): with ``--reply-ppl`` each is a dict."""
    if results and isinstance(results[0], dict):
        return [r["reply"] for r in results], [(r["nll"], r["tokens"]) for r in results]
    return list(results), None


def attach_reply_ids(items: list[dict], pairs: list[dict], lm) -> None:
    """Give each generation item its prompt's and gold reply's ids (``pairs``: the task's ``inputs`` per item),
    the reply closed by end-of-document when the tokenizer has one."""
    if lm.encoder_decoder:
        raise ConfigError("--reply-ppl scores the gold replies with a GPT; this checkpoint is not one")
    eod = [lm.eod] if lm.eod is not None else []
    for it, x in zip(items, pairs):
        it["context_ids"], it["reply_ids"] = lm.encode(x["prompt"]), lm.encode(x["target"]) + eod


def score_replies(lm, replies: list, items: list[dict]) -> list[dict]:
    """``{"reply", "nll", "tokens"}`` per item: the generated reply and its gold reply's score."""
    return [{"reply": r, **reply_nll(lm, it["context_ids"], it["reply_ids"])} for r, it in zip(replies, items)]


def reply_ppl(records: list[dict]) -> float:
    """The corpus reply perplexity of the records' ``reply_ppl`` parts: exp of summed NLL over summed tokens
    (``math.exp``, as it has always been reported; NaN without tokens)."""
    tokens = sum(r["reply_ppl"]["tokens"] for r in records)
    return math.exp(sum(r["reply_ppl"]["nll"] for r in records) / tokens) if tokens else float("nan")
