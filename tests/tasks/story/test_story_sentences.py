"""The story writer's sentence step never returns an empty sentence: a tiny GPT whose first sampled token is
the separator (end of document, or the line break the writer stops at) still writes words."""
import pytest
import torch

from mwb.evaluation.generation import SamplingParams, generate
from mwb.tasks.story.sentences import has_words, word_token_mask, write_sentences
from tests.helpers.biased_lm import EOD, NEWLINE, VOCAB, WORDS, lm

PROMPTS = [" w1 w2.\n w3", " w7 w8 w9 w10", " w5"]


@pytest.mark.parametrize("sep", [EOD, NEWLINE])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_separator_first_still_gives_words(sep, temperature):
    m = lm({sep: 50.0})
    params = SamplingParams(max_tokens=8, temperature=temperature, top_k=40, seed=3, stop=("\n",))
    assert [g.text for g in generate(m, PROMPTS, params)] == ["", "", ""]  # the bug: what generate returns
    got = write_sentences(m, PROMPTS, params, batch_size=2)
    for s in got:
        assert has_words(s.text) and s.redrawn and not s.empty and not s.truncated
        assert s.text.count(" ") == 0  # one word token, then the (biased) separator ends it
    if temperature == 0.0:  # greedy: the redrawn token is the most likely word token, computed by hand
        mask = word_token_mask(m)
        for p, s in zip(PROMPTS, got):
            logits = m.logits(torch.tensor([m.encode(p)]))[0, -1].masked_fill(~mask, float("-inf"))
            assert s.text == VOCAB[int(logits.argmax())].strip()
    again = write_sentences(m, PROMPTS, params, batch_size=3)  # seeded: the same sentences at any batch size
    assert [s.text for s in again] == [s.text for s in got]


def test_word_mask_drops_separators_punctuation_and_specials():
    mask = word_token_mask(lm())
    assert mask.tolist() == [False, False, False, False] + [True] * 60


def test_sentences_that_have_words_are_untouched_and_the_length_limit_is_said():
    m = lm({WORDS + 1: 50.0})  # " w1" forever: no stop before max_tokens
    params = SamplingParams(max_tokens=5, temperature=0.0, stop=("\n",))
    got = write_sentences(m, PROMPTS, params)
    assert [s.text for s in got] == ["w1 w1 w1 w1 w1"] * 3
    assert all(s.truncated and not s.redrawn and not s.empty for s in got)


def test_no_room_after_the_prompt_is_an_empty_sentence_reported_not_hidden():
    m = lm({EOD: 50.0}, max_positions=6)
    got = write_sentences(m, [" w1 w2 w3 w4 w5"], SamplingParams(max_tokens=4, temperature=0.0))
    assert got[0].empty and got[0].text == ""
