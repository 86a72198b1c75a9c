"""Batched generation: continuous batches on the preallocated KV cache (and the left-padded no-cache
reference) give batch-1 results token for token (learned and rotary positions, one process and TP = 2, and
T5's seq2seq path under TP = 2), each row stops on its own, seeded
sampling is reproducible and does not depend on the batch, and the top-k / top-p filters act per row."""
import json

import pytest
import torch

from mwb.evaluation.generation import SamplingParams, filter_logits, generate
from mwb.evaluation.lm import LanguageModel
from mwb.evaluation.seq2seq import generate_seq2seq
from tests.helpers.distributed import run_ranks

from .eval_helpers import LAMBADA, tiny_gpt
from .test_eval_seq2seq import IdTokenizer, t5
from .test_eval_seq2seq import sources as t5_sources

ROPE = dict(position_embedding="rope", normalization="rmsnorm", activation="swiglu", init_std=0.2)


def sixteen_prompts(tok) -> list:
    """16 token-id prompts of 16 different lengths (1 … 46 tokens) and one empty string."""
    with open(LAMBADA) as f:
        texts = [json.loads(line)["text"] for line in f]
    ids = [tok.encode(texts[i % len(texts)]) for i in range(15)]
    return [row[: 1 + 3 * i] for i, row in enumerate(ids)] + [""]


def rope_lm(tok, state=None) -> LanguageModel:
    return LanguageModel(tiny_gpt(tok.vocab_size, state=state, seed=5, **ROPE), tok, state=state)


def assert_same(batched, single) -> None:
    for a, b in zip(batched, single, strict=True):
        assert a.tokens == b.tokens and a.text == b.text and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


@pytest.mark.parametrize("which", ["learned", "rope"])
def test_batched_greedy_equals_batch_one(eval_lm, eval_tokenizer, which):
    lm = eval_lm if which == "learned" else rope_lm(eval_tokenizer)
    prompts = sixteen_prompts(eval_tokenizer)
    assert len({len(p) for p in prompts}) == 16
    params = SamplingParams(max_tokens=12, temperature=0, stop_at_eod=False)
    single = generate(lm, prompts, params, batch_size=1)
    assert_same(generate(lm, prompts, params, batch_size=16), single)
    assert_same(generate(lm, prompts, params, batch_size=5), single)  # uneven last batch
    # full recomputation of the padded batch (no cache) agrees too
    assert_same(generate(lm, prompts, SamplingParams(max_tokens=12, temperature=0, stop_at_eod=False,
                                                     use_cache=False), batch_size=16), single)


class _EodTokenizer:
    """The test tokenizer with a chosen token playing end of document."""

    def __init__(self, tok, eod: int) -> None:
        self._tok, self.eod = tok, eod

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_each_row_stops_on_its_own(eval_lm, eval_tokenizer):
    prompts = sixteen_prompts(eval_tokenizer)[:8] + [[5] * 250]
    free = generate(eval_lm, prompts, SamplingParams(max_tokens=20, temperature=0, stop_at_eod=False))
    assert len(free[-1].tokens) == 7 and free[-1].finish_reason == "length"  # 256 positions: its own limit
    assert all(len(g.tokens) == 20 and g.finish_reason == "length" for g in free[:-1])
    # end of document: a token that row 0 produces at its 4th step; every row stops at its first one
    eod = free[0].tokens[3]
    lm = LanguageModel(eval_lm.model, _EodTokenizer(eval_tokenizer, eod))
    stopped = generate(lm, prompts, SamplingParams(max_tokens=20, temperature=0))
    for g, f in zip(stopped, free):
        k = f.tokens.index(eod) if eod in f.tokens else len(f.tokens)
        assert g.tokens == f.tokens[:k] and g.finish_reason == ("stop" if eod in f.tokens else "length")
    assert len(stopped[0].tokens) <= 3
    # a stop string from row 1's text ends row 1 only (and cuts its text there)
    stop = free[1].text[5:9]
    cut = generate(eval_lm, prompts, SamplingParams(max_tokens=20, temperature=0, stop=(stop,),
                                                    stop_at_eod=False))
    assert cut[1].finish_reason == "stop" and cut[1].text == free[1].text[: free[1].text.find(stop)]
    for g, f in zip(cut, free):
        if stop not in f.text:
            assert g.tokens == f.tokens and g.finish_reason == f.finish_reason


def test_seeded_sampling_is_reproducible_and_batch_independent(eval_lm, eval_tokenizer):
    prompts = sixteen_prompts(eval_tokenizer)[:6]
    p = SamplingParams(max_tokens=10, temperature=1.0, top_k=50, top_p=0.9, seed=21, n=3, stop_at_eod=False)
    a = generate(eval_lm, prompts, p, batch_size=16)
    assert len(a) == 18 and all(g.prompt_tokens == list(prompts[i // 3]) for i, g in enumerate(a))
    assert [g.tokens for g in a] == [g.tokens for g in generate(eval_lm, prompts, p, batch_size=16)]
    assert [g.tokens for g in a] == [g.tokens for g in generate(eval_lm, prompts, p, batch_size=4)]
    # row r's stream depends on (seed, r) only: the first two prompts alone draw the same 6 samples
    assert [g.tokens for g in a[:6]] == [g.tokens for g in generate(eval_lm, prompts[:2], p, batch_size=1)]
    assert len({tuple(g.tokens) for g in a[:3]}) == 3  # n samples of one prompt are distinct streams
    other = generate(eval_lm, prompts, SamplingParams(**{**p.__dict__, "seed": 22}))
    assert [g.tokens for g in a] != [g.tokens for g in other]


def test_filter_logits_per_row():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.15, 0.3], [0.4, 0.1, 0.3, 0.2]]))
    assert torch.isfinite(filter_logits(logits, top_p=0.75)).tolist() == [[False, True, False, True],
                                                                           [True, False, True, True]]
    assert torch.isfinite(filter_logits(logits, top_k=2)).tolist() == [[False, True, False, True],
                                                                        [True, False, True, False]]
    # top-p acts on what top-k left (renormalised): row 0 keeps 0.5/0.95 and 0.3/0.95
    assert torch.isfinite(filter_logits(logits, top_k=3, top_p=0.6)).tolist() == [[False, True, False, True],
                                                                                    [True, False, True, False]]
    kept = filter_logits(logits, top_k=3)
    assert torch.equal(kept[torch.isfinite(kept)], logits[torch.isfinite(kept)])  # survivors unchanged
    tie = torch.log(torch.tensor([0.4, 0.1, 0.25, 0.25]))
    assert torch.isfinite(filter_logits(tie, top_k=2)).tolist() == [True, False, True, True]  # ties stay


def tp_worker(rank: int, world: int, tokenizer_path: str) -> dict:
    from mwb.core.parallel import ParallelDims, build_state
    from mwb.core.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer_path)
    state = build_state(ParallelDims(world_size=world, tp=world))
    prompts = sixteen_prompts(tok)
    params = SamplingParams(max_tokens=8, temperature=0, stop_at_eod=False)
    sampled = SamplingParams(max_tokens=8, temperature=0.8, top_k=40, seed=9, n=2, stop_at_eod=False)
    out = {}
    for which, lm in (("learned", LanguageModel(tiny_gpt(tok.vocab_size, state=state), tok, state=state)),
                      ("rope", rope_lm(tok, state))):
        out[which] = [g.tokens for g in generate(lm, prompts, params, batch_size=16)]
        out[which + "_sampled"] = [g.tokens for g in generate(lm, prompts[:4], sampled, batch_size=16)]
    out["t5"] = [g.tokens for g in generate_seq2seq(t5(state=state), IdTokenizer(), t5_sources(), params, state=state)]
    return out


@pytest.mark.multiprocess
def test_tensor_parallel_batched_generation_equals_one_process(eval_tokenizer, eval_tokenizer_path):
    ranks = run_ranks(tp_worker, 2, eval_tokenizer_path, timeout_s=300)
    prompts = sixteen_prompts(eval_tokenizer)
    params = SamplingParams(max_tokens=8, temperature=0, stop_at_eod=False)
    sampled = SamplingParams(max_tokens=8, temperature=0.8, top_k=40, seed=9, n=2, stop_at_eod=False)
    for which, lm in (("learned", LanguageModel(tiny_gpt(eval_tokenizer.vocab_size), eval_tokenizer)),
                      ("rope", rope_lm(eval_tokenizer))):
        want = [g.tokens for g in generate(lm, prompts, params, batch_size=1)]
        want_sampled = [g.tokens for g in generate(lm, prompts[:4], sampled, batch_size=1)]
        for r in ranks:
            assert r[which] == want
            assert r[which + "_sampled"] == want_sampled
    want = [g.tokens for g in generate_seq2seq(t5(), IdTokenizer(), t5_sources(), params, batch_size=1)]
    assert ranks[0]["t5"] == want and ranks[1]["t5"] == want
