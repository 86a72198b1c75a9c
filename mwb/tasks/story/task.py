"""``mwb eval story``: a ``mwb finetune story`` run on held-out ROCStories (test split by default).

Data: ROCStories / Story Cloze (default: the stories in ConceptNet 5.7.0's sdist), first ``--stories`` of the
split. Inputs: each story's first sentence; the run writes sentences 2–5 (:class:`.writer.StoryWriter`).
Objective: custom (no training here). Metrics:

``ppl``             perplexity of the gold sentences 2–5 (target tokens, as in training) given the gold story
                    so far and, for a knowledge generator, the knowledge ranked for the *predicted* keywords
``distinct_4``      unique 4-grams / all 4-grams over all generated stories (no control)
``repeat_4``        share of generated stories with a repeated 4-gram (no control)
``inclusion_control`` / ``inclusion_no_control``
                    keyword inclusion of the test's keywords in the sentence written with them as control,
                    and in the sentence written at the same step without control. The test's keywords for
                    story i, sentence t are the last word of the best RAKE phrase of sentence t of test story
                    i + 1 (another story's words: unlikely unless the control works).
"""
from __future__ import annotations

import json
import math

import torch

from mwb.core.data.package_files import package_path

from ..api.base import Option, Task
from ..api.registry import register
from .data import read_stories
from .keywords import sentence_keywords
from .metrics import keyword_inclusion, repeat_n, story_distinct
from .writer import SENTENCES, StoryWriter, WriteConfig


def control_keywords(stories) -> list[list[list[str]]]:
    """For story ``i``: one keyword per sentence 2–5, taken from story ``i + 1`` (cyclically)."""
    out = []
    for i in range(len(stories)):
        other = stories[(i + 1) % len(stories)]
        out.append([[(sentence_keywords(s, 1) or ["story"])[0].split()[-1]] for s in other.sentences[1:]])
    return out


@register("story")
class StoryEval(Task):
    description = "MEGATRON-CNTRL stories: PPL, distinct-4, repeat-4, keyword inclusion with/without control"
    objective = "custom"
    eval_split = "test"
    options = {**Task.options,
               "stories": Option(int, 100, "Evaluate the first N stories of the split (0: all)."),
               "conceptnet": Option(str, None, "ConceptNet assertions CSV instead of the run's knowledge base."),
               "seed": Option(int, 1234, "Sampling seed of the generated sentences.")}

    def data_path(self, path):
        return path or package_path("rocstories")

    def load(self, path):
        stories = read_stories(self.data_path(path), self.opts["split"] or self.eval_split)
        return stories[: self.opts["stories"]] if self.opts["stories"] else stories

    def load_model(self, checkpoint, tokenizer=None, device=None):
        writer = StoryWriter(checkpoint, device=device or "cpu", conceptnet=self.opts["conceptnet"])
        return writer.cfg, writer

    def build(self, examples, runner):
        self.examples = examples
        return [{"story": s, "control": c} for s, c in zip(examples, control_keywords(examples))]

    def run(self, runner: StoryWriter, items):
        if not items:
            return []
        cfg = WriteConfig(seed=self.opts["seed"], batch_size=self.opts["batch_size"] or 32)
        firsts = [it["story"].sentences[0] for it in items]
        free = runner.write(firsts, cfg=cfg)
        ctrl = runner.write(firsts, [it["control"] for it in items], cfg=cfg)
        nll = gold_nll(runner, [it["story"] for it in items])
        return [{"free": f["sentences"], "controlled": c["sentences"], "control": it["control"], "nll": n}
                for f, c, it, n in zip(free, ctrl, items, nll)]

    def aggregate(self, results):
        free = [" ".join(r["free"]) for r in results]
        nll, count = sum(r["nll"][0] for r in results), sum(r["nll"][1] for r in results)
        with_c = [(k, r["controlled"][t + 1]) for r in results for t, k in enumerate(r["control"])]
        without = [(k, r["free"][t + 1]) for r in results for t, k in enumerate(r["control"])]
        gold = [" ".join(s.sentences) for s in self.examples]
        self.samples = [{"first": s.sentences[0], "free": r["free"], "controlled": r["controlled"],
                         "control": r["control"], "gold": list(s.sentences)} for s, r in zip(self.examples, results)]
        return {"ppl": math.exp(nll / count) if count else float("nan"),
                "distinct_4": story_distinct(free, 4), "repeat_4": repeat_n(free, 4),
                "inclusion_control": keyword_inclusion(with_c), "inclusion_no_control": keyword_inclusion(without),
                "distinct_4_controlled": story_distinct([" ".join(r["controlled"]) for r in results], 4),
                "repeat_4_controlled": repeat_n([" ".join(r["controlled"]) for r in results], 4),
                "gold_distinct_4": story_distinct(gold, 4), "gold_repeat_4": repeat_n(gold, 4),
                "stories": len(results), "target_tokens": count}

    def files(self) -> dict[str, str]:
        """``stories.jsonl`` beside results.json: each story written without and with the test's control."""
        return {"stories.jsonl": "".join(json.dumps(r) + "\n" for r in getattr(self, "samples", []))}


@torch.no_grad()
def gold_nll(writer: StoryWriter, stories) -> list[tuple[float, int]]:
    """Per story: summed NLL (nats) and count of the tokens of gold sentences 2–5 and the closing
    end-of-document token, as the generator was trained, given the gold story so far."""
    lm, out = writer.lm, []
    contexts = [" ".join(s.sentences[:t]) for s in stories for t in range(1, SENTENCES)]
    targets = [s.sentences[t] for s in stories for t in range(1, SENTENCES)]
    keywords = writer.predict_keywords(contexts)
    prompts, _ = writer.prompts(contexts, keywords)
    per = []
    for p, tgt in zip(prompts, targets):
        ids_p, ids_t = lm.encode(p), lm.encode(" " + tgt) + ([lm.eod] if lm.eod is not None else [])
        lp = lm.token_logprobs(ids_p + ids_t)[len(ids_p):]
        per.append((-sum(lp), len(ids_t)))
    for i in range(len(stories)):
        chunk = per[i * (SENTENCES - 1):(i + 1) * (SENTENCES - 1)]
        out.append((sum(c[0] for c in chunk), sum(c[1] for c in chunk)))
    return out
