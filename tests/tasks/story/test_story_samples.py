"""Sample-and-rerank in the story writer: with ``samples`` k > 1 each step keeps, of k draws from one batched
call, the one that newly includes most of its keywords; with k = 1 the writer decodes exactly as before."""
import pytest

from mwb.core.config import ConfigError
from mwb.evaluation.generation import SamplingParams
from mwb.tasks.story.control import new_inclusion
from mwb.tasks.story.generator import generator_prompt
from mwb.tasks.story.sentences import Sentence, write_sentences
from mwb.tasks.story.writer import SENTENCES, StoryWriter, WriteConfig, pick
from tests.helpers.biased_lm import lm
from tests.helpers.needs import needs

FIRSTS = [" w1 w2 w3.", " w7 w8."]


def _writer(model) -> StoryWriter:
    """A writer without knowledge parts (no keyword model, no ranker): only the generator decides."""
    w = object.__new__(StoryWriter)
    w.lm, w.keyword_lm, w.ranker, w.kb, w.use_knowledge = model, None, None, None, False
    w.top_n, w.candidates = 0, 0
    return w


@needs(data=["wordnet"])  # inclusion compares WordNet base forms
def test_pick_prefers_inclusion_then_words_then_a_stop_then_the_first_draw():
    c = [Sentence("the cat sat"), Sentence("a dog barked", truncated=True), Sentence("my dog ran"),
         Sentence("", empty=True)]
    assert pick(c, ["dog"], "Ann went out.") == 2  # both include it; the one that ended at a stop wins
    assert pick(c, ["dog"], "Ann had a dog.") == 0  # already in the story: no draw newly includes it
    assert pick(c[3:] + c[:1], ["moon"], "") == 1  # none includes it: one with words beats the empty one
    assert pick(c, ["dog", "cat"], "") == 0  # ties on one keyword each, no truncation: the first drawn


@needs(data=["wordnet"])
@pytest.mark.parametrize("k", [1, 4])
def test_each_step_keeps_the_draw_with_most_keywords(k):
    m = lm()
    control = [[["w5"], ["w9"], ["w11"], ["w13"]], [["w20"], ["w21"], ["w22"], ["w23"]]]
    cfg = WriteConfig(temperature=1.0, top_k=0, seed=7, samples=k, max_tokens=12)
    stories = _writer(m).write(FIRSTS, control, cfg)
    for i, story in enumerate(stories):  # replay every step by hand from the story written so far
        for t in range(SENTENCES - 1):
            context = " ".join(story["sentences"][:t + 1])
            params = SamplingParams(max_tokens=12, temperature=1.0, top_k=0, seed=7 + t, stop=("\n",))
            prompts = [generator_prompt(" ".join(s["sentences"][:t + 1]), None) for s in stories]
            drawn = write_sentences(m, [p for p in prompts for _ in range(k)], params)[i * k:(i + 1) * k]
            step = story["steps"][t]
            assert step["samples"] == k and story["sentences"][t + 1] == drawn[step["chosen"]].text
            hits = [new_inclusion(control[i][t][0], d.text, context) for d in drawn]
            assert hits[step["chosen"]] == max(hits)  # no other draw includes more
            if k == 1:
                assert step["chosen"] == 0
    if k == 4:  # the lever does something on this model: some step kept a later draw for its keyword
        assert any(st["chosen"] > 0 for s in stories for st in s["steps"])


def test_samples_below_one_is_refused():
    with pytest.raises(ConfigError, match="samples must be at least 1"):
        WriteConfig(samples=0)
