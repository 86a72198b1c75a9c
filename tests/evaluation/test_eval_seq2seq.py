"""Encoder–decoder generation: batched greedy decoding with the KV cache (cross-attention keys/values
computed once) gives, token for token, what decoding each source alone by full recomputation gives (T5
relative and Megatron learned positions), and what Hugging Face T5's greedy ``generate`` gives with the
same weights; each row stops on its own at the end token."""
from dataclasses import replace

import pytest
import torch

from mwb.core.compose import build_model
from mwb.core.models.t5 import T5Model
from mwb.core.parallel import single_process_state
from mwb.evaluation.generation import SamplingParams
from mwb.evaluation.seq2seq import Seq2SeqModel, generate_seq2seq
from tests.core.models.test_t5_model import CFG, V, hf_to_mwb


class IdTokenizer:
    """Text is space-separated token ids; 0 is padding (and T5's decoder start), 1 the end token."""
    vocab_size, pad, eos = V, 0, 1

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids) -> str:
        return " ".join(str(t) for t in ids)


def sources(count: int = 9) -> list[list[int]]:
    g = torch.Generator().manual_seed(4)
    return [torch.randint(2, V, (2 + 2 * i,), generator=g).tolist() + [1] for i in range(count)]


def reference(model, start: int, end: int, source: list[int], max_tokens: int) -> list[int]:
    """Greedy decoding of one source, recomputing the whole decoder sequence at every step (no cache)."""
    dec = [start]
    with torch.no_grad():
        for _ in range(max_tokens):
            tok = int(model(torch.tensor([source]), torch.tensor([dec]))[0, -1, :V].argmax())
            if tok == end:
                break
            dec.append(tok)
    return dec[1:]


def t5(position: str = "relative", state=None):
    """Large enough init that greedy decoding does not repeat one token (so positions matter)."""
    cfg = replace(CFG, position_embedding=position, init_std=0.3, max_position_embeddings=64)
    return build_model(cfg, state or single_process_state(), V, seed=3).eval()


@pytest.mark.parametrize("position", ["relative", "learned"])
def test_batched_greedy_equals_one_source_recomputed(position):
    model = t5(position)
    src = sources()
    params = SamplingParams(max_tokens=10, temperature=0)
    batched = generate_seq2seq(model, IdTokenizer(), src, params, batch_size=16)
    for g, s in zip(batched, src):
        assert g.tokens == reference(model, 0, 1, s, 10) and g.prompt_tokens == s
    assert [g.tokens for g in generate_seq2seq(model, IdTokenizer(), src, params, batch_size=1)] == \
        [g.tokens for g in batched]


def test_matches_hf_t5_greedy_generate():
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8,
                                   relative_attention_max_distance=20, dropout_rate=0.0,
                                   feed_forward_proj="relu", tie_word_embeddings=True, layer_norm_epsilon=1e-6,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=59,
                                   initializer_factor=8.0)  # so greedy output is not one repeated token
    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(hf_cfg).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "layer_norm" in n or "relative_attention_bias" in n:
                p.add_(0.3 * torch.randn_like(p))
    model = T5Model(CFG, V, V).eval()
    model.load_state_dict(hf_to_mwb(hf.state_dict(), 2, 2))
    src = sources(6)

    class End59(IdTokenizer):  # a token these weights produce: some rows stop early
        eos = 59

    reasons = []
    ours = generate_seq2seq(Seq2SeqModel(model, End59()), None, src,
                            SamplingParams(max_tokens=12, temperature=0), batch_size=16)
    for g, s in zip(ours, src):
        with torch.no_grad():
            out = hf.generate(torch.tensor([s]), max_new_tokens=12, do_sample=False, num_beams=1)[0].tolist()
        want = out[1:]  # drop the decoder start; HF ends with the end token when it stops early
        if want and want[-1] == 59:
            want, reason = want[:-1], "stop"
        else:
            reason = "length"
        assert g.tokens == want and g.finish_reason == reason
        reasons.append(reason)
    assert {"stop", "length"} == set(reasons)


def test_each_row_stops_at_its_end_token():
    model = t5()
    src = sources()
    free = generate_seq2seq(model, IdTokenizer(), src, SamplingParams(max_tokens=10, temperature=0,
                                                                     stop_at_eod=False))
    end = free[0].tokens[2]  # a token row 0 produces at its 3rd step plays the end token

    class EndTokenizer(IdTokenizer):
        eos = end

    got = generate_seq2seq(model, EndTokenizer(), src, SamplingParams(max_tokens=10, temperature=0))
    for g, f, s in zip(got, free, src):
        k = f.tokens.index(end) if end in f.tokens else len(f.tokens)
        assert g.tokens == f.tokens[:k] and g.finish_reason == ("stop" if end in f.tokens else "length")
    seeded = SamplingParams(max_tokens=6, temperature=1.0, seed=5, n=2, stop_at_eod=False)
    a = generate_seq2seq(model, IdTokenizer(), src, seeded, batch_size=16)
    b = generate_seq2seq(model, IdTokenizer(), src, seeded, batch_size=3)
    assert [g.tokens for g in a] == [g.tokens for g in b] and len(a) == 2 * len(src)
