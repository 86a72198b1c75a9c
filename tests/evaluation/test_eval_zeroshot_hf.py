"""LAMBADA accuracy and WikiText perplexity from the harness equal the same quantities computed directly
with ``transformers.GPT2LMHeadModel`` holding the same weights (an independent implementation: Hugging Face
tokenizer offsets to find the last word, a per-token formula for the sliding window)."""
import json
import math

import pytest
import torch

from mwb.evaluation.detokenizers import wikitext_detokenizer
from mwb.evaluation.evaluator import evaluate
from mwb.tasks.api.registry import get_task

from .eval_helpers import LAMBADA, WIKI, to_hf


@pytest.fixture(scope="module")
def hf_pair(eval_model, eval_tokenizer, eval_tokenizer_path):
    from transformers import PreTrainedTokenizerFast
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=eval_tokenizer_path)
    return to_hf(eval_model, eval_tokenizer.vocab_size), hf_tok


def _hf_lambada(hf, tok, strict: bool):
    correct, nll, ntok = [], 0.0, 0
    for line in open(LAMBADA):
        text = json.loads(line)["text"]
        word = text.split()[-1]
        start = text.rfind(word)
        if strict:
            ctx, tgt = tok(text[:start].strip())["input_ids"], tok(" " + word)["input_ids"]
        else:
            enc = tok(text, return_offsets_mapping=True)
            ids, offs = enc["input_ids"], enc["offset_mapping"]
            k = sum(1 for _, end in offs if end > start)  # tokens that reach into the last word
            ctx, tgt = ids[:-k], ids[-k:]
        with torch.no_grad():
            logits = hf(torch.tensor([ctx + tgt[:-1]])).logits[0, len(ctx) - 1:]
        lp = torch.log_softmax(logits.float(), -1)
        t = torch.tensor(tgt)
        correct.append(bool((lp.argmax(-1) == t).all()))
        nll -= float(lp.gather(-1, t[:, None]).sum())
        ntok += len(tgt)
    return sum(correct) / len(correct), math.exp(nll / ntok)


@pytest.mark.parametrize("strict", [False, True])
def test_lambada_matches_transformers(eval_lm, hf_pair, strict):
    hf, tok = hf_pair
    got = evaluate(get_task("lambada")(strict=strict, batch_size=5), eval_lm)["metrics"]
    acc, ppl = _hf_lambada(hf, tok, strict)
    print(f"LAMBADA strict={strict}: mwb acc={got['accuracy']:.4f} ppl={got['target_perplexity']:.6f}; "
          f"transformers acc={acc:.4f} ppl={ppl:.6f}")
    assert 0 < got["accuracy"] < 1, "the fixture model should get some, not all, answers right"
    assert got["accuracy"] == acc
    assert got["target_perplexity"] == pytest.approx(ppl, rel=1e-5)
    assert got["num_examples"] == 12


def _hf_wikitext(hf, tok, seq: int, stride: int):
    raw = open(WIKI, encoding="utf-8").read()
    ids = tok(wikitext_detokenizer(raw))["input_ids"]
    n = len(ids)
    # token t (1..n-1) is scored by window i = max(0, ceil((t - seq) / stride)), whose inputs start at i*stride
    by_window: dict[int, list[int]] = {}
    for t in range(1, n):
        by_window.setdefault(max(0, -(-(t - seq) // stride)), []).append(t)
    nll = 0.0
    for i, targets in by_window.items():
        s = i * stride
        with torch.no_grad():
            lp = torch.log_softmax(hf(torch.tensor([ids[s:s + seq]])).logits[0].double(), -1)
        nll -= sum(float(lp[t - 1 - s, ids[t]]) for t in targets)
    words = len(raw.split())
    return math.exp(nll / (n - 1)), math.exp(nll / (words - 1)), n


@pytest.mark.parametrize("seq,overlap", [(64, 64), (64, 16), (100, 7)])
def test_wikitext_matches_transformers(eval_lm, hf_pair, seq, overlap):
    hf, tok = hf_pair
    got = evaluate(get_task("wikitext")(seq_length=seq, overlap=overlap, batch_size=4), eval_lm)["metrics"]
    ppl, adjusted, n = _hf_wikitext(hf, tok, seq, overlap)
    print(f"WikiText seq={seq} overlap={overlap}: mwb ppl={got['perplexity']:.6f} adj={got['adjusted_perplexity']:.6f};"
          f" transformers ppl={ppl:.6f} adj={adjusted:.6f}")
    assert got["num_tokens"] == n and got["num_scored_tokens"] == n - 1
    assert got["perplexity"] == pytest.approx(ppl, rel=1e-5)
    assert got["adjusted_perplexity"] == pytest.approx(adjusted, rel=1e-5)
