"""Generation: the KV cache changes nothing (vs full recomputation each step), seeds reproduce, filters and
stop strings behave, and reported log-probabilities are the model's (checked against transformers)."""
import pytest
import torch

from mwb.evaluation.generation import SamplingParams, filter_logits, generate

from .eval_helpers import to_hf

PROMPTS = ["The old lighthouse keeper", "Every spring the river", ""]


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=24, temperature=0),
                                    SamplingParams(max_tokens=24, temperature=0.9, top_k=40, top_p=0.95, seed=7)])
def test_kv_cache_equals_full_recompute(eval_lm, params):
    cached = generate(eval_lm, PROMPTS, params)
    full = generate(eval_lm, PROMPTS, SamplingParams(**{**params.__dict__, "use_cache": False}))
    for a, b in zip(cached, full):
        assert a.tokens == b.tokens and a.text == b.text and len(a.tokens) > 0
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_seeded_sampling_is_reproducible(eval_lm):
    p = SamplingParams(max_tokens=16, temperature=1.0, seed=11)
    a, b = generate(eval_lm, PROMPTS[:2], p), generate(eval_lm, PROMPTS[:2], p)
    c = generate(eval_lm, PROMPTS[:2], SamplingParams(max_tokens=16, temperature=1.0, seed=12))
    assert [g.tokens for g in a] == [g.tokens for g in b]
    assert [g.tokens for g in a] != [g.tokens for g in c]
    top1 = generate(eval_lm, PROMPTS[:2], SamplingParams(max_tokens=16, top_k=1, seed=3))
    greedy = generate(eval_lm, PROMPTS[:2], SamplingParams(max_tokens=16, temperature=0))
    assert [g.tokens for g in top1] == [g.tokens for g in greedy]


def test_filter_logits():
    logits = torch.log(torch.tensor([0.05, 0.5, 0.15, 0.3]))
    kept = torch.isfinite(filter_logits(logits, top_p=0.75))
    assert kept.tolist() == [False, True, False, True]  # smallest set reaching 0.75: 0.5 + 0.3
    assert torch.isfinite(filter_logits(logits, top_k=3)).tolist() == [False, True, True, True]
    assert torch.isfinite(filter_logits(logits, top_p=0.01)).sum() == 1  # the top token always stays
    with pytest.raises(ValueError):
        SamplingParams(max_tokens=-1)


def test_stop_strings_max_tokens_and_context_limit(eval_lm):
    full = generate(eval_lm, "The baker opened", SamplingParams(max_tokens=30, temperature=0))[0]
    assert full.finish_reason == "length" and len(full.tokens) == 30
    stop = full.text[8:11]
    cut = generate(eval_lm, "The baker opened", SamplingParams(max_tokens=30, temperature=0, stop=(stop,)))[0]
    assert cut.finish_reason == "stop" and cut.text == full.text[:full.text.find(stop)]
    assert cut.tokens == full.tokens[:len(cut.tokens)] and eval_lm.decode(cut.tokens) == cut.text[:len(
        eval_lm.decode(cut.tokens))]
    assert generate(eval_lm, "x", SamplingParams(max_tokens=0))[0].tokens == []
    # 250 prompt tokens, 256 positions: 7 tokens fit (the last one needs no position of its own)
    long = generate(eval_lm, [[5] * 250], SamplingParams(max_tokens=20, temperature=0, stop_at_eod=False))[0]
    assert len(long.tokens) == 7 and long.finish_reason == "length"
    with pytest.raises(ValueError, match="at most 256"):
        generate(eval_lm, [[5] * 300], SamplingParams(max_tokens=1))


def test_logprobs_are_the_models(eval_lm, eval_model, eval_tokenizer):
    hf = to_hf(eval_model, eval_tokenizer.vocab_size)
    g = generate(eval_lm, "Grandmother kept a notebook", SamplingParams(max_tokens=8, temperature=0.7, seed=1,
                                                                          top_logprobs=3), echo_logprobs=True)[0]
    ids = g.prompt_tokens + g.tokens
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)
    want = [float(ref[i - 1, ids[i]]) for i in range(1, len(ids))]
    assert g.prompt_logprobs[0] is None
    assert g.prompt_logprobs[1:] + g.logprobs == pytest.approx(want, abs=1e-4)
    assert len(g.top_logprobs) == 8 and all(len(d) == 3 for d in g.top_logprobs)
    best = max(g.top_logprobs[0].values())
    assert best == pytest.approx(float(ref[len(g.prompt_tokens) - 1].max()), abs=1e-4)
