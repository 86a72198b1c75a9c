"""MSDP's prompts (Liu et al., Findings ACL 2022; Megatron-LM's ``tasks/msdp`` until 2025): the two prompt
formats and how their in-context examples are chosen, and the knowledge-free prompt mwb compares them with.

Samples are wizard turns of Wizard-of-Wikipedia dialogues (Megatron's ``process_wow_dataset`` rule): the
context is every earlier turn (a turn not ending in ``.?!`` gets a ``.``), the knowledge is the wizard's
checked sentence, the topic its checked passage's title (else the dialogue's chosen topic).

Stage 1, knowledge generation — each example is ``( last turn ) topic => knowledge``; the prompt is ten of
them, one per line (``example + " \\n"``), then ``( last turn ) topic =>``. Examples come from training
samples that used knowledge; for an unseen-topic test set, also only those whose knowledge names the topic
and has no brackets. They are compared with the query (the last three turns, prefixed ``( topic ) ``
for unseen topics) by dense similarity: when the test topic occurs in training, the ten most similar
examples of that topic; otherwise the most similar example of each of the ten most similar topics. Samples
of topics absent from the test set qualify only with short knowledge (≤ 20 words) not starting with
"It"/"This". The most similar example comes last, nearest the query.

Stage 2, response generation — a fixed set of twenty ``Topic: t. User says: u We know that: k System
replies: r`` examples, chosen once from training by the overlap filter (:func:`keeps_response_example`) and
a seeded shuffle; the prompt ends ``Topic: t. User says: u We know that: k System replies:`` with the
stage-1 knowledge.

Knowledge-free prompting, the one-stage control — the same twenty training samples, in the same order, with
their knowledge left out: ``Topic: t. User says: u System replies: r`` examples, then ``Topic: t. User
says: u System replies:``. The prompt differs from stage 2's only by the ``We know that: k`` parts, so a
difference between the two conditions' replies is what the (generated) knowledge does.

Text is word-tokenized as in Megatron (NLTK), here with NLTK's data-free pieces: a Punkt sentence splitter
with default parameters and a short abbreviation list (no trained model is downloaded), and the
Treebank-style word tokenizer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .data import Turn

KNOWLEDGE_EXAMPLES, RESPONSE_EXAMPLES = 10, 20


@dataclass(frozen=True)
class Sample:
    """One wizard turn to predict: its topic, the turns before it, and the gold knowledge and response."""
    topic: str
    turns: tuple
    knowledge: str  # "" when the wizard used none
    response: str


def _punctuated(text: str) -> str:
    return text if text.endswith(("?", ".", "!")) else text + "."


def wizard_samples(conversations: list[dict]) -> list[Sample]:
    """Every wizard turn after the first turn of each dialogue (E's :class:`Turn` conversations)."""
    out = []
    for c in conversations:
        turns: list[Turn] = c["turns"]
        seen = [_punctuated(turns[0].text)] if turns else []
        for t in turns[1:]:
            text = _punctuated(t.text)
            if "wizard" in t.speaker.lower():
                out.append(Sample(t.topic or c.get("topic") or "", tuple(seen), t.knowledge or "", text))
            seen.append(text)
    return out


# Punkt's trained English model knows these; an untrained splitter would end a sentence at "U.S."
ABBREVIATIONS = ("u.s", "u.k", "dr", "mr", "mrs", "ms", "st", "jr", "sr", "vs", "e.g", "i.e", "etc", "no", "inc")


def word_tokens(text: str) -> list[str]:
    """NLTK's ``word_tokenize`` without downloaded data: Punkt sentences (default parameters plus
    :data:`ABBREVIATIONS`), each split by the Treebank-style word tokenizer."""
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    params = PunktParameters()
    params.abbrev_types = set(ABBREVIATIONS)
    words = NLTKWordTokenizer()
    return [w for s in PunktSentenceTokenizer(params).tokenize(text) for w in words.tokenize(s)]


def tokenized(text: str) -> str:
    return " ".join(word_tokens(text)).strip()


# ---------------------------------------------------------------------------------------------- stage 1


def knowledge_example(s: Sample) -> str:
    return f"( {s.turns[-1]} ) {s.topic} => {s.knowledge}"


def knowledge_query(topic: str, turns: Sequence[str], unseen: bool) -> str:
    """What the examples are compared with: the last three turns (``( topic ) `` first for unseen topics)."""
    return (f"( {topic} ) " if unseen else "") + " ".join(turns[-3:])


def knowledge_prompt(examples: Sequence[str], topic: str, last_turn: str) -> str:
    return "".join(e.strip() + " \n" for e in examples) + f"( {last_turn} ) {topic} =>"


@dataclass
class KnowledgePool:
    """Training samples usable as stage-1 examples, with the text each is compared by."""
    samples: list
    queries: list


def knowledge_pool(train: Sequence[Sample], test_topics: set, unseen: bool) -> KnowledgePool:
    samples, queries = [], []
    for s in train:
        if not s.knowledge or not s.turns:
            continue
        if unseen and ("(" in s.knowledge or ")" in s.knowledge or s.topic not in s.knowledge):
            continue
        if s.topic not in test_topics and (len(s.knowledge.split()) > 20
                                           or s.knowledge.startswith(("It", "it", "This", "this"))):
            continue
        samples.append(s)
        queries.append(knowledge_query(s.topic, s.turns, unseen))
    return KnowledgePool(samples, queries)


def select_knowledge_examples(pool: KnowledgePool, pool_emb: np.ndarray, topic: str, query_emb: np.ndarray,
                              k: int = KNOWLEDGE_EXAMPLES) -> list[str]:
    """Stage-1 examples for one test sample, least similar first (see the module docstring)."""
    sims = pool_emb @ query_emb
    same = [i for i, s in enumerate(pool.samples) if s.topic == topic]
    if same:
        best = sorted(same, key=lambda i: -sims[i])[:k]
    else:
        best, topics = [], set()
        for i in sorted(range(len(pool.samples)), key=lambda i: -sims[i]):
            if pool.samples[i].topic not in topics:
                topics.add(pool.samples[i].topic)
                best.append(i)
                if len(best) == k:
                    break
    return [knowledge_example(pool.samples[i]) for i in reversed(best)]


# ---------------------------------------------------------------------------------------------- stage 2


def copied_tokens(response: Sequence[str], knowledge: Sequence[str], min_run: int = 10) -> int:
    """Response tokens in runs of at least ``min_run`` consecutive tokens that all occur in the knowledge."""
    vocab, total, run = set(knowledge), 0, 0
    for tok in list(response) + [None]:  # None closes the last run
        if tok is not None and tok in vocab:
            run += 1
            continue
        total += run if run >= min_run else 0
        run = 0
    return total


def keeps_response_example(s: Sample) -> bool:
    """The overlap filter: knowledge used, 60–90 % of the response copied from it in runs of ≥ 10 tokens,
    and those runs cover ≥ 80 % of the knowledge's length."""
    if not s.knowledge or not s.turns:
        return False
    k, r = word_tokens(s.knowledge), word_tokens(s.response)
    n = copied_tokens(r, k)
    return 0.6 * len(r) <= n <= 0.9 * len(r) and n >= 0.8 * len(k)


def response_example(s: Sample) -> str:
    return (f"Topic: {s.topic}. User says: {tokenized(s.turns[-1])} We know that: {tokenized(s.knowledge)} "
            f"System replies: {tokenized(s.response)}")


def response_samples(train: Sequence[Sample], seed: int = 1234, k: int = RESPONSE_EXAMPLES) -> list[Sample]:
    """The training samples behind the fixed stage-2 examples: those the filter keeps, shuffled with ``seed``
    (numpy), the first ``k``. The knowledge-free prompt uses the same samples, so the two differ only by it."""
    kept = [s for s in train if keeps_response_example(s)]
    order = np.arange(len(kept))
    np.random.RandomState(seed).shuffle(order)  # one shuffle of n items draws the same permutation for any list
    return [kept[i] for i in order[:k]]


def response_examples(train: Sequence[Sample], seed: int = 1234, k: int = RESPONSE_EXAMPLES) -> list[str]:
    """The fixed stage-2 examples: those the filter keeps, shuffled with ``seed`` (numpy), the first ``k``."""
    return [response_example(s) for s in response_samples(train, seed, k)]


def response_prompt(examples: Sequence[str], topic: str, last_turn: str, knowledge: str) -> str:
    return ("".join(e.strip() + " \n" for e in examples)
            + f"Topic: {topic}. User says: {tokenized(last_turn)} We know that: {tokenized(knowledge)} "
              f"System replies:")


# --------------------------------------------------------------------------- knowledge-free (one stage)


def knowledge_free_example(s: Sample) -> str:
    """A stage-2 example without its knowledge: ``Topic: t. User says: u System replies: r``."""
    return f"Topic: {s.topic}. User says: {tokenized(s.turns[-1])} System replies: {tokenized(s.response)}"


def knowledge_free_prompt(examples: Sequence[str], topic: str, last_turn: str) -> str:
    """The reply prompted from the context alone: the examples, one per line, then the test turn."""
    return ("".join(e.strip() + " \n" for e in examples)
            + f"Topic: {topic}. User says: {tokenized(last_turn)} System replies:")
