"""One conversation with a language model, as ``mwb chat`` runs it: history, optional retrieved knowledge
(Santhanam et al. 2020: a local knowledge source searched with the dialogue context), optional reference
utterances of an actor (Boyd et al. 2020: condition on what that speaker said elsewhere), and the prompt
rendered by the model's chat format.

Why a class outside the CLI: the terminal loop only reads lines and prints replies; everything a test must
check — the prompt, what was retrieved, the reply, and that tensor-parallel ranks produce the same reply —
lives here. Grounding goes into the system message (the one place every chat template keeps):

    <system prompt>
    Knowledge:
    - <title>: <passage>            (top-k BM25 passages for the last two turns, when --knowledge)
    Speak like this person, who said:
    - <reference utterance>          (k reference utterances of the actor, when --actor)

Old turns are dropped, oldest first, when the prompt plus the reply budget would not fit the model.
``dialogue_layout`` renders instead the ``Conversation:`` layout that ``mwb finetune dialogue`` trains on
(:func:`mwb.tasks.dialogue.examples.render_prompt`), so a model fine-tuned there is talked to as trained.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from mwb.core.config import ConfigError
from mwb.evaluation.chat_format import ChatFormat
from mwb.evaluation.generation import SamplingParams, generate
from mwb.retrieval.bm25 import BM25Retriever
from mwb.retrieval.inputs import read_evidence

from . import data as dialogue_data
from .examples import render_prompt
from .knowledge_sources import knowledge_path

DEFAULT_SYSTEM = "You are a friendly conversational partner. Reply in one or two sentences."


@dataclass(frozen=True)
class ChatSettings:
    """What shapes every reply: sampling, the system prompt, how much knowledge and history to use."""
    max_tokens: int = 64
    temperature: float = 0.7
    top_p: float = 0.9
    seed: Optional[int] = None
    system: str = DEFAULT_SYSTEM
    top_k_passages: int = 2
    passage_chars: int = 300

    def params(self, stops: Sequence[str]) -> SamplingParams:
        return SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                              seed=self.seed, stop=tuple(stops))


class KnowledgeBase:
    """A passages TSV (DPR's ``id<TAB>text<TAB>title``) or a named source (:mod:`.knowledge_sources`:
    the bundled Wikipedia sample, WordNet glosses), searched with BM25."""

    def __init__(self, source: str) -> None:
        self.path = knowledge_path(source)
        self.evidence = read_evidence(self.path)
        if not len(self.evidence):
            raise ConfigError(f"--knowledge {source}: no passages in {self.path}")
        self.bm25 = BM25Retriever(self.evidence)

    def search(self, query: str, k: int) -> list[dict]:
        _, rows = self.bm25.search([query], k)
        ev = self.evidence
        return [{"id": ev.ids[r], "title": ev.titles[r], "text": ev.texts[r]} for r in rows[0] if r >= 0]


@dataclass
class ChatSession:
    """``lm`` (a :class:`~mwb.evaluation.lm.LanguageModel`) talking with one user."""
    lm: object
    chat_format: ChatFormat = field(default_factory=ChatFormat)
    settings: ChatSettings = field(default_factory=ChatSettings)
    knowledge: Optional[KnowledgeBase] = None
    references: Sequence[str] = ()  # the actor's reference utterances
    history: list = field(default_factory=list)
    last_knowledge: list = field(default_factory=list)
    dialogue_layout: bool = False  # render like `mwb finetune dialogue` trained (docs/dialogue.md), not as chat

    def _render(self, history: Sequence[dict], passages: Sequence[dict]) -> str:
        if self.dialogue_layout:
            turns = [dialogue_data.Turn("bot" if m["role"] == "assistant" else "user", m["content"]) for m in history]
            return render_prompt(turns, "bot", self.references, [p["text"] for p in passages])
        return self.chat_format.render(self.messages(history, passages))

    @property
    def stops(self) -> tuple[str, ...]:
        return ("\n",) if self.dialogue_layout else self.chat_format.stops

    def system_message(self, passages: Optional[Sequence[dict]] = None) -> str:
        passages = self.last_knowledge if passages is None else passages
        parts = [self.settings.system] if self.settings.system else []
        if passages:
            n = self.settings.passage_chars
            parts.append("Knowledge:\n" + "\n".join(f"- {p['title']}: {p['text'][:n]}" if p["title"] else
                                                    f"- {p['text'][:n]}" for p in passages))
        if self.references:
            parts.append("Speak like this person, who said:\n" + "\n".join(f"- {u}" for u in self.references))
        return "\n".join(parts)

    def messages(self, history: Sequence[dict], passages: Optional[Sequence[dict]] = None) -> list[dict]:
        system = self.system_message(passages)
        return ([{"role": "system", "content": system}] if system else []) + list(history)

    def prompt(self) -> str:
        """The rendered prompt for the current history; until it fits the model with the reply budget, the
        oldest turns are dropped, then (with only the user's last turn left) the lowest-ranked passages."""
        history, passages = list(self.history), list(self.last_knowledge)
        while True:
            text = self._render(history, passages)
            if len(self.lm.encode(text)) + self.settings.max_tokens <= self.lm.max_length:
                return text
            if len(history) > 1:
                history = history[2:] if len(history) > 2 else history[1:]
            elif passages:
                passages.pop()
            else:
                return text  # generate() says how long it is

    def reply(self, user_text: str) -> str:
        """Add the user's turn, retrieve knowledge for the last two turns, generate and record the reply."""
        self.history.append({"role": "user", "content": user_text})
        if self.knowledge is not None:
            query = " ".join(m["content"] for m in self.history[-2:])
            self.last_knowledge = self.knowledge.search(query, self.settings.top_k_passages)
        gen = generate(self.lm, [self.prompt()], self.settings.params(self.stops))[0]
        text = gen.text.strip()
        self.history.append({"role": "assistant", "content": text})
        return text

    def reset(self) -> None:
        self.history.clear()
        self.last_knowledge = []


def actor_references(actor: str, k: int, say=print) -> list[str]:
    """``k`` utterances of chitchat actor ``actor`` (a ``sender`` id of the chitchat dataset), picked by the
    same seeded rule the multi-actor task uses for its references (:func:`mwb.tasks.dialogue.data.references`)."""
    conversations = dialogue_data.read_chitchat()
    index = dialogue_data.utterances_by_actor(conversations)
    if actor not in index:
        busiest = sorted(index, key=lambda a: -len(index[a]))[:5]
        raise ConfigError(f"--actor {actor}: no such chitchat actor (the busiest are {', '.join(busiest)})")
    refs = dialogue_data.references(index, actor, set(), k, seed="chat")
    say(f"actor {actor}: {len(index[actor])} utterances in {len({c for c, _ in index[actor]})} conversations; "
        f"conditioning on {len(refs)}")
    return refs
