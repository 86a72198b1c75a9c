"""The chat path (:class:`ChatSession`): prompts hold the system message, knowledge and history and are cut to
fit; greedy replies under tensor parallelism (2 gloo ranks) equal one process, turn by turn."""
import pytest

from mwb.evaluation.chat_format import ChatFormat
from mwb.evaluation.generation import SamplingParams, generate
from mwb.tasks.dialogue.chat_session import ChatSession, ChatSettings
from tests.evaluation.eval_helpers import tiny_gpt
from tests.helpers.checkpoints import TOKENIZER
from tests.helpers.distributed import run_ranks
from tests.helpers.needs import needs

TURNS = ["Hello, how are you today?", "Tell me about the old castle.", "Why?"]
SETTINGS = ChatSettings(max_tokens=10, temperature=0, system="Be brief.")


def _session(state=None):
    from mwb.core.tokenizers import load_tokenizer
    from mwb.evaluation.lm import LanguageModel
    tok = load_tokenizer(TOKENIZER)
    lm = LanguageModel(tiny_gpt(tok.vocab_size, state=state), tok, state=state, max_length=256)
    return ChatSession(lm, ChatFormat(), SETTINGS)


def _tp_worker(rank, world):
    from mwb.core.parallel import ParallelDims, build_state
    session = _session(build_state(ParallelDims(world_size=world, tp=world)))
    return [session.reply(t) for t in TURNS], session.prompt()


def test_prompt_holds_system_knowledge_and_history_and_is_cut_to_fit():
    s = _session()
    s.history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                 {"role": "user", "content": "castle?"}]
    s.last_knowledge = [{"id": "1", "title": "Castle", "text": "A castle is a fortified structure."}]
    assert s.prompt() == ("System: Be brief.\nKnowledge:\n- Castle: A castle is a fortified structure.\n"
                          "User: hi\nAssistant: hello\nUser: castle?\nAssistant:")
    s.history = [{"role": "user", "content": "word " * 100}, {"role": "assistant", "content": "ok"}] + s.history
    s.last_knowledge = [dict(s.last_knowledge[0], text="long " * 150)]  # clipped to 300 characters
    s.lm.max_length = 128  # the old long turn goes, the passage stays
    p = s.prompt()
    assert len(s.lm.encode(p)) + SETTINGS.max_tokens <= 128 and "word word" not in p and "long long" in p
    assert p.endswith("User: hi\nAssistant: hello\nUser: castle?\nAssistant:")
    s.lm.max_length = 40  # then the other old turns, then the passage; the last turn stays
    p = s.prompt()
    assert p == "System: Be brief.\nUser: castle?\nAssistant:"


def test_reply_is_generate_on_the_rendered_prompt():
    s = _session()
    reply = s.reply(TURNS[0])
    want = generate(s.lm, [ChatFormat().render([{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": TURNS[0]}])],
                    SamplingParams(max_tokens=10, temperature=0, stop=ChatFormat().stops))[0].text.strip()
    assert reply == want and s.history[-1] == {"role": "assistant", "content": want}


@pytest.mark.multiprocess
def test_chat_replies_under_tp2_equal_one_process():
    one = _session()
    want = [one.reply(t) for t in TURNS]
    assert any(want)  # something was generated
    for replies, prompt in run_ranks(_tp_worker, 2, timeout_s=300):
        assert replies == want and prompt == one.prompt()


@needs(data=["chitchat"])
def test_actor_references_come_from_that_chitchat_actor():
    from mwb.core.config import ConfigError
    from mwb.tasks.dialogue.chat_session import actor_references
    from mwb.tasks.dialogue import data as dd
    index = dd.utterances_by_actor(dd.read_chitchat())
    actor = max(index, key=lambda a: len(index[a]))
    refs = actor_references(actor, 4, say=lambda m: None)
    mine = {text for _, text in index[actor]}
    assert len(refs) == 4 and all(r in mine for r in refs)
    with pytest.raises(ConfigError, match="no such chitchat actor"):
        actor_references("not-an-actor", 4, say=lambda m: None)


def test_dialogue_layout_is_the_fine_tuning_prompt():
    from mwb.tasks.dialogue.data import Turn
    from mwb.tasks.dialogue.examples import render_prompt
    s = _session()
    s.dialogue_layout, s.references = True, ["I love jazz."]
    s.history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hey"},
                 {"role": "user", "content": "music?"}]
    s.last_knowledge = [{"id": "1", "title": "Jazz", "text": "Jazz is a music genre."}]
    want = render_prompt([Turn("user", "hi"), Turn("bot", "hey"), Turn("user", "music?")], "bot", ["I love jazz."],
                         ["Jazz is a music genre."])
    assert s.prompt() == want and want.endswith("A: hi\nB: hey\nA: music?\nB:") and s.stops == ("\n",)
