"""Writing stories sentence by sentence with the trained parts: keywords → knowledge → ranked top-N → sentence.

Why batched: every story of a batch advances one sentence at a time, so each of the four steps is one
batched keyword prediction, one batched ranking and one batched generation (:func:`generate`, left-padded
with the KV cache) over all stories, not a loop over stories. Control: where the user (or the evaluation)
gives keywords for a step, they replace the predicted ones for that story and step; everything downstream
(retrieval, ranking, generation) is unchanged, which is how MEGATRON-CNTRL steers a story.

Decoding (the paper gives no settings): keywords greedily; sentences with top-k 40 sampling at temperature
0.8, seeded with seed + sentence index (row streams of :func:`generate`, so a story does not depend on its
batch), cut at the first line break, at most ``max_tokens`` tokens. A sentence always has words
(:mod:`.sentences`: a first token that would end it at once is drawn again among word tokens); each step
says whether its sentence was ``truncated`` at ``max_tokens`` and, as an error the commands count, whether
it stayed ``empty``; each story counts its ``empty_sentences``.

Samples (``WriteConfig.samples``, default 1: one draw per sentence, the paper's decoding): with k > 1 each
story draws k candidate sentences per step from the same prompt (rows ``i * k + j`` of one batched call) and
keeps the one that newly includes most of that step's keywords (:func:`.control.new_inclusion`: the rule the
evaluation scores), preferring a candidate with words and one that ended at a stop, then the earliest drawn.
The rule is the same for given and predicted keywords, so without control it favours the predicted keywords,
never the user's: sample-and-rerank is how a small generator that includes a keyword in some draws but not
most is steered without retraining. Each step records its ``samples`` and the ``chosen`` draw.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from mwb.core.errors import ConfigError, DataError
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.loading import load_language_model

from .control import new_inclusion
from .generator import generator_prompt
from .keyword_predictor import keyword_prompt
from .keywords import parse_keywords
from .knowledge import knowledge_base, knowledge_sentences
from .ranker import Ranker
from .sentences import Sentence, write_sentences

SENTENCES = 5


@dataclass(frozen=True)
class WriteConfig:
    max_tokens: int = 40
    temperature: float = 0.8
    top_k: int = 40
    seed: int = 1234
    batch_size: int = 32
    samples: int = 1  # candidate sentences per step; > 1 keeps the one that includes most of its keywords

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ConfigError(f"samples must be at least 1, got {self.samples}")


def pick(candidates: list[Sentence], keywords: list[str], before: str) -> int:
    """Index of the candidate to keep (see the module docstring): most keywords newly included, then one with
    words, then one not cut at the length limit, then the earliest drawn."""
    def key(j: int):
        c = candidates[j]
        hits = sum(new_inclusion(k, c.text, before) for k in keywords)
        return (-hits, c.empty, c.truncated, j)
    return min(range(len(candidates)), key=key)


def read_manifest(run: str) -> dict:
    path = os.path.join(run, "story.json")
    if not os.path.isfile(path):
        raise DataError(f"{run} is not a `mwb finetune story` run (no story.json): train one with "
                        f"`mwb finetune story` and pass its directory as --checkpoint")
    with open(path) as f:
        return json.load(f)


class StoryWriter:
    """The trained parts of one ``mwb finetune story`` run, loaded once."""

    def __init__(self, run: str, device="cpu", conceptnet: Optional[str] = None) -> None:
        self.manifest = m = read_manifest(run)
        self.run = run
        self.keyword_lm = load_language_model(m["keywords"], device=device)[1] if m["keywords"] else None
        self.cfg, self.lm = load_language_model(m["generator"], device=device)  # the generator's run config
        self.ranker = Ranker(m["ranker"], device=device) if m["knowledge"] else None
        self.kb = knowledge_base(conceptnet or m.get("conceptnet"))
        self.top_n, self.candidates, self.use_knowledge = m["top_n"], m["candidates"], m["knowledge"]

    def predict_keywords(self, contexts: list[str], batch_size: int = 32) -> list[list[str]]:
        if self.keyword_lm is None:  # a generator without knowledge: keywords would reach nothing
            return [[] for _ in contexts]
        params = SamplingParams(max_tokens=12, temperature=0.0, stop=("\n",))
        gens = generate(self.keyword_lm, [keyword_prompt(c) for c in contexts], params, batch_size=batch_size)
        # a keyword is a RAKE phrase: at most 3 words, 2 per sentence, as in training
        return [[k for k in parse_keywords(g.text) if len(k.split()) <= 3][:2] for g in gens]

    def knowledge(self, contexts: list[str], keywords: list[list[str]]) -> list[list[str]]:
        """The ranked top-N knowledge sentences for each context and its keywords."""
        candidates = [knowledge_sentences(self.kb, k, self.candidates) for k in keywords]
        return self.ranker.top(contexts, candidates, self.top_n)

    def prompts(self, contexts: list[str], keywords: list[list[str]]) -> tuple[list[str], list[list[str]]]:
        know = self.knowledge(contexts, keywords) if self.use_knowledge else [[] for _ in contexts]
        return [generator_prompt(c, k if self.use_knowledge else None) for c, k in zip(contexts, know)], know

    def write(self, firsts: list[str], control: Optional[list[list[list[str]]]] = None,
              cfg: WriteConfig = WriteConfig()) -> list[dict]:
        """One story per first sentence. ``control[i][t]``: keywords for story ``i``'s sentence ``t + 2``
        (empty: predicted). Returns per story its sentences and, per written sentence, the keywords used,
        whether they were the user's, and the knowledge given to the generator."""
        stories = [{"sentences": [f.strip()], "steps": []} for f in firsts]
        for t in range(SENTENCES - 1):
            params = SamplingParams(max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                                    seed=cfg.seed + t, stop=("\n",))  # a fresh stream per sentence
            contexts = [" ".join(s["sentences"]) for s in stories]
            given = [(control[i][t] if control and t < len(control[i]) else []) for i in range(len(stories))]
            need = [i for i, g in enumerate(given) if not g]
            predicted = dict(zip(need, self.predict_keywords([contexts[i] for i in need], cfg.batch_size)))
            keywords = [given[i] or predicted[i] for i in range(len(stories))]
            prompts, know = self.prompts(contexts, keywords)
            k = cfg.samples
            drawn = write_sentences(self.lm, [p for p in prompts for _ in range(k)], params, cfg.batch_size)
            for i, s in enumerate(stories):
                cands = drawn[i * k:(i + 1) * k]
                j = pick(cands, keywords[i], contexts[i]) if k > 1 else 0
                g = cands[j]
                s["sentences"].append(g.text)
                s["steps"].append({"keywords": keywords[i], "controlled": bool(given[i]), "knowledge": know[i],
                                   "truncated": g.truncated, "empty": g.empty, "samples": k, "chosen": j})
        for s in stories:
            s["empty_sentences"] = sum(st["empty"] for st in s["steps"])
        return stories
