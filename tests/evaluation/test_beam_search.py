"""Beam search for GPT (left-padded KV cache) and T5: one beam is greedy, four beams never score below greedy
by the model's own log-probability (recomputed without a cache), a batch gives what each prompt gives alone,
no completion repeats an n-gram with ``no_repeat_ngram_size``, and tokens equal Hugging Face
``generate(num_beams=4)`` on the same weights (GPT-2 and T5)."""
import pytest
import torch

from mwb.evaluation.beam_search import ban_repeats, banned_tokens
from mwb.evaluation.generation import SamplingParams, beam_generate, generate
from mwb.evaluation.lm import LanguageModel
from mwb.evaluation.seq2seq import Seq2SeqModel, beam_generate_seq2seq, generate_seq2seq

from .eval_helpers import tiny_gpt, to_hf
from .test_eval_seq2seq import IdTokenizer, sources, t5

V = 64


class GptTokenizer:
    """Text is space-separated ids; ``eod`` is set per test (a token these weights do produce)."""
    vocab_size = V

    def __init__(self, eod: int) -> None:
        self.eod = eod

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids) -> str:
        return " ".join(str(t) for t in ids)


def gpt(eod: int = 62) -> LanguageModel:
    """A random GPT-2-shaped model with peaked next-token distributions (no near-ties)."""
    torch.manual_seed(0)
    model = tiny_gpt(V, seed=5, num_layers=2, hidden_size=32, num_attention_heads=4, init_std=0.4,
                     max_position_embeddings=64).eval()
    return LanguageModel(model, GptTokenizer(eod))


def prompts(count: int = 6) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, V, (1 + 2 * i,), generator=g).tolist() for i in range(count)]


def gpt_logprob(lm: LanguageModel, prompt: list[int], gen) -> float:
    """Sum log p of the completion (+ the end token when it closed it), recomputed in one forward pass."""
    tail = gen.tokens + ([lm.eod] if gen.finish_reason == "stop" else [])
    lp = lm.token_logprobs(prompt + tail)
    return sum(lp[len(prompt):])


def t5_logprob(model, source: list[int], gen, end: int = 1) -> float:
    tail = gen.tokens + ([end] if gen.finish_reason == "stop" else [])
    dec = [0] + tail
    with torch.no_grad():
        logits = model(torch.tensor([source]), torch.tensor([dec[:-1]]))[0, :, :V]
    return float(torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tail)[:, None]).sum())


def ended_by_eod(gens) -> set:
    return {g.finish_reason for g in gens}


def test_banned_tokens_by_hand():
    assert banned_tokens([1, 2, 3, 1], 2) == [2]           # "1 2" seen: after "… 1", 2 would repeat it
    assert banned_tokens([2, 1, 5, 2, 1, 7, 2, 1], 3) == [5, 7]  # "2 1 5", "2 1 7" seen; it ends "2 1"
    assert banned_tokens([4, 5, 6], 1) == [4, 5, 6] and banned_tokens([4, 5], 3) == []
    out = ban_repeats(torch.zeros(2, 8), [[1, 2, 3, 1], [5]], 2)
    assert torch.isinf(out[0, 2]) and int(torch.isinf(out).sum()) == 1


def test_gpt_one_beam_is_greedy_and_four_beams_score_at_least_greedy():
    lm = gpt()
    ps = prompts()
    greedy = generate(lm, ps, SamplingParams(max_tokens=12, temperature=0))
    assert ended_by_eod(greedy) == {"stop", "length"}  # the end token closes some completions, not all
    one = beam_generate(lm, ps, SamplingParams(max_tokens=12, num_beams=1, length_penalty=0.0))
    assert [g.tokens for g in one] == [g.tokens for g in greedy]
    free = SamplingParams(max_tokens=12, temperature=0, stop_at_eod=False)  # no end token: lengths all equal
    one_lp1 = beam_generate(lm, ps, SamplingParams(max_tokens=12, num_beams=1, stop_at_eod=False))
    assert [g.tokens for g in one_lp1] == [g.tokens for g in generate(lm, ps, free)]
    four = generate(lm, ps, SamplingParams(max_tokens=12, num_beams=4, length_penalty=0.0))
    gains = []
    for p, b, g in zip(ps, four, greedy):
        lb, lg = gpt_logprob(lm, p, b), gpt_logprob(lm, p, g)
        assert lb >= lg - 1e-4, (p, b.tokens, g.tokens, lb, lg)
        own = lm.token_logprobs(p + b.tokens)[len(p):]  # the reported per-token log-probabilities are the model's
        assert len(b.logprobs) == len(own) and max((abs(x - y) for x, y in zip(b.logprobs, own)), default=0) < 1e-4
        gains.append(lb - lg)
    assert max(gains) > 1e-3  # beam search found better sequences for some prompt


def test_gpt_batched_beams_equal_one_prompt_at_a_time_and_return_n_best():
    lm = gpt()
    ps = prompts()
    params = SamplingParams(max_tokens=10, num_beams=4, n=2, length_penalty=1.0, top_logprobs=2)
    batched = generate(lm, ps, params, batch_size=16)
    single = generate(lm, ps, params, batch_size=1)
    assert len(batched) == 2 * len(ps)
    assert [(g.tokens, g.finish_reason) for g in batched] == [(g.tokens, g.finish_reason) for g in single]
    for a, b in zip(batched, single):
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0) < 1e-5
        assert len(a.top_logprobs) == len(a.tokens)
    for k in range(0, len(batched), 2):  # n = 2: the two best, distinct, best first by the beam score
        a, b = batched[k], batched[k + 1]
        assert a.tokens != b.tokens
        # beam score: sum log p (the end token's included) / generated length (the end token counted)
        score = [gpt_logprob(lm, ps[k // 2], g) / (len(g.tokens) + (g.finish_reason == "stop")) for g in (a, b)]
        assert score[0] >= score[1] - 1e-5, score


def test_no_repeat_ngram_in_greedy_and_beams():
    lm = gpt()
    ps = prompts()
    base = dict(max_tokens=30, stop_at_eod=False)

    def repeats(tokens, n):
        grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
        return len(grams) - len(set(grams))

    free = generate(lm, ps, SamplingParams(temperature=0, **base))
    assert sum(repeats(g.tokens, 2) for g in free) > 0  # this model loops when left alone
    for params in (SamplingParams(temperature=0, no_repeat_ngram_size=2, **base),
                   SamplingParams(num_beams=4, no_repeat_ngram_size=2, **base),
                   SamplingParams(temperature=1.0, seed=3, no_repeat_ngram_size=3, **base)):
        for g in generate(lm, ps, params):
            assert repeats(g.tokens, params.no_repeat_ngram_size) == 0 and len(g.tokens) == 30


def test_gpt_beams_match_hf_generate():
    pytest.importorskip("transformers")
    lm = gpt()
    hf = to_hf(lm.model, V)
    reasons = set()
    for lp in (1.0, 0.5):
        ours = generate(lm, prompts(), SamplingParams(max_tokens=12, num_beams=4, length_penalty=lp), batch_size=4)
        for p, g in zip(prompts(), ours):
            ids = torch.tensor([p])
            with torch.no_grad():
                out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, num_beams=4,
                                  do_sample=False, length_penalty=lp, eos_token_id=lm.eod, pad_token_id=lm.eod,
                                  early_stopping=False)[0, len(p):].tolist()
            want, reason = (out[:-1], "stop") if out and out[-1] == lm.eod else (out, "length")
            assert g.tokens == want and g.finish_reason == reason, (lp, p, g.tokens, out)
            reasons.add(reason)
    assert reasons == {"stop", "length"}


# ---------------------------------------------------------------------------------------------------- T5


def test_t5_one_beam_is_greedy_batched_equals_single_and_four_beams_score_at_least_greedy():
    model = t5()

    class End(IdTokenizer):
        eos = 54  # a token these weights produce: some rows stop early

    s2s = Seq2SeqModel(model, End())
    src = sources(6)
    greedy = generate_seq2seq(s2s, None, src, SamplingParams(max_tokens=10, temperature=0))
    assert ended_by_eod(greedy) == {"stop", "length"}
    one = beam_generate_seq2seq(s2s, src, SamplingParams(max_tokens=10, num_beams=1, length_penalty=0.0))
    assert [g.tokens for g in one] == [g.tokens for g in greedy]
    params = SamplingParams(max_tokens=10, num_beams=4, length_penalty=0.0)
    four = generate_seq2seq(s2s, None, src, params, batch_size=16)
    assert [g.tokens for g in four] == [g.tokens for g in generate_seq2seq(s2s, None, src, params, batch_size=1)]
    for s, b, g in zip(src, four, greedy):
        assert t5_logprob(model, s, b, 54) >= t5_logprob(model, s, g, 54) - 1e-4


def test_t5_beams_match_hf_generate_with_no_repeat_ngram():
    transformers = pytest.importorskip("transformers")
    from tests.core.models.test_t5_model import CFG, hf_to_mwb
    from mwb.core.models.t5 import T5Model
    hf_cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8,
                                   relative_attention_max_distance=20, dropout_rate=0.0,
                                   feed_forward_proj="relu", tie_word_embeddings=True, layer_norm_epsilon=1e-6,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=59,
                                   initializer_factor=8.0)
    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(hf_cfg).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "layer_norm" in n or "relative_attention_bias" in n:
                p.add_(0.3 * torch.randn_like(p))
    model = T5Model(CFG, V, V).eval()
    model.load_state_dict(hf_to_mwb(hf.state_dict(), 2, 2))

    class End59(IdTokenizer):
        eos = 59

    s2s = Seq2SeqModel(model, End59())
    reasons = set()
    for lp, ngram in ((1.0, 0), (0.7, 2)):
        ours = generate_seq2seq(s2s, None, sources(6), SamplingParams(max_tokens=12, num_beams=4, length_penalty=lp,
                                                                      no_repeat_ngram_size=ngram))
        for s, g in zip(sources(6), ours):
            with torch.no_grad():
                out = hf.generate(torch.tensor([s]), max_new_tokens=12, num_beams=4, do_sample=False,
                                  length_penalty=lp, no_repeat_ngram_size=ngram, early_stopping=False)[0, 1:].tolist()
            want, reason = (out[:-1], "stop") if out and out[-1] == 59 else (out, "length")
            assert g.tokens == want and g.finish_reason == reason, (lp, ngram, s, g.tokens, out)
            reasons.add(reason)
    assert reasons == {"stop", "length"}
