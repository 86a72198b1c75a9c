"""``mwb eval story``: a ``mwb finetune story`` run on held-out ROCStories (test split by default).

Data: ROCStories / Story Cloze (default: the stories in ConceptNet 5.7.0's sdist), first ``--stories`` of the
split. Inputs: each story's first sentence; the run writes sentences 2–5 (:class:`.writer.StoryWriter`).
Objective: custom (no training here). Metrics:

``ppl``             perplexity of the gold sentences 2–5 (target tokens, as in training) given the gold story
                    so far and, for a knowledge generator, the knowledge ranked for the *predicted* keywords
``distinct_4``      unique 4-grams / all 4-grams over all generated stories (no control)
``repeat_4``        share of generated stories with a repeated 4-gram (no control)
``inclusion_control`` / ``inclusion_no_control``
                    share of the test's keywords newly included in the sentence written with them as control,
                    and in the sentence written at the same step without control. The test's keywords for
                    story i are words of other stories that are in no sentence of story i and have knowledge,
                    one per sentence 2–5; "newly" means not already in the story written so far
                    (:mod:`.control`).

``empty_sentences`` / ``truncated_sentences``
                    generated sentences with no words (failures) / cut at the length limit, over every
                    story written

``--control with`` / ``--control without`` write only the controlled / only the uncontrolled stories (half the
generation) and report ``inclusion``, ``distinct_4`` and ``repeat_4`` of the stories written, so two runs of
one model compare with ``mwb compare A B --metric inclusion`` item by item.
"""
from __future__ import annotations

import glob
import json
import math
import os
import sys
from typing import Optional

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.core.data.package_files import package_path

from ..api.base import Option, Task
from ..api.registry import register
from ..api.objectives import CUSTOM
from .control import control_keywords, inclusion_share
from .data import read_stories
from .metrics import has_repeat, repeat_n, story_distinct, words
from mwb.core.training.run_dir import RUNS

from .train import MANIFEST
from .evaluation import TINY_STORIES, default_stories, generator_params, gold_nll  # noqa: F401
from .writer import StoryWriter, WriteConfig

# --control → which stories a run writes: without control ("free"), with the test's keywords ("controlled")
WRITES = {"both": ("free", "controlled"), "without": ("free",), "with": ("controlled",)}


@register("story")
class StoryEval(Task):
    description = "MEGATRON-CNTRL stories: PPL, distinct-4, repeat-4, keyword inclusion with/without control"
    objective = CUSTOM
    eval_split = "test"
    options = {**Task.options,
               "stories": Option(int, None, low=0, help="Evaluate the first N stories of the split (0: all; "
                                                         "default 100 for a tiny generator, 24 for one of "
                                                         "SmolLM2-135M's size)."),
               "first_story": Option(int, 0, low=0, help="Skip the split's first K stories: evaluate stories K to "
                                                         "K + N - 1 (disjoint samples per seed, as mwb repro "
                                                         "megatron-cntrl draws them)."),
               "conceptnet": Option(str, None, "ConceptNet assertions CSV instead of the run's knowledge base."),
               "seed": Option(int, 1234, "Sampling seed of the generated sentences."),
               "samples": Option(int, 1, low=1, help="Candidate sentences per step, the one including most of "
                                                     "its keywords kept (1: one draw, the paper's decoding)."),
               "control": Option(str, "both", "Stories to write: both (without and with the test's keywords), "
                                              "with (only controlled) or without (only uncontrolled).")}

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        if self.opts["control"] not in WRITES:
            raise ConfigError(f"--control must be one of {', '.join(WRITES)}, got {self.opts['control']!r}")

    @classmethod
    def default_checkpoint(cls, say=print) -> Optional[str]:
        """The newest ``runs/finetune-story-*`` run that finished (its ``story.json``): what the no-argument
        ``mwb finetune story`` wrote, from SmolLM2-135M with LoRA when the models extra is installed."""
        runs = [r for r in glob.glob(os.path.join(RUNS, "finetune-story-*")) if os.path.isfile(os.path.join(r, MANIFEST))]
        if not runs:
            raise ConfigError("no --checkpoint given and no finished runs/finetune-story-* run: run `mwb finetune "
                              "story` first or pass --checkpoint RUN")
        run = max(runs, key=os.path.getmtime)
        say(f"mwb: no --checkpoint given: evaluating the newest story run {run}")
        return run

    def data_path(self, path):
        return path or package_path("rocstories")

    def load(self, path):
        stories = read_stories(self.data_path(path), self.opts["split"] or self.eval_split)
        n = TINY_STORIES if self.option("stories") is None else self.option("stories")  # load_model decides it
        first, split = self.opts["first_story"], self.opts["split"] or self.eval_split
        if first and (first >= len(stories) or (n and first + n > len(stories))):
            raise DataError(f"--first-story {first} with --stories {n or 'all'}: the {split} split has "
                            f"{len(stories)} stories")
        stories = stories[first:]
        return stories[:n] if n else stories

    def load_model(self, checkpoint, tokenizer=None, device=None):
        writer = StoryWriter(checkpoint, device=device or "cpu", conceptnet=self.opts["conceptnet"])
        if self.option("stories") is None:
            self.decide(stories=default_stories(writer.cfg))
            lora = f", LoRA rank {writer.cfg.lora.rank}" if writer.cfg.lora.rank else ""
            print(f"mwb: story eval start: the run's generator ({generator_params(writer.cfg) / 1e6:.0f}M "
                  f"parameters{lora}): {self.option('stories')} stories", file=sys.stderr, flush=True)
        return writer.cfg, writer

    def build(self, examples, runner):
        self.examples = examples
        control = control_keywords(examples, has_knowledge=lambda w: bool(runner.kb.triples(w)))
        return [{"story": s, "control": c} for s, c in zip(examples, control)]

    def run(self, runner: StoryWriter, items):
        if not items:
            return []
        cfg = WriteConfig(seed=self.opts["seed"], batch_size=self.opts["batch_size"] or 32,
                          samples=self.opts["samples"])
        firsts = [it["story"].sentences[0] for it in items]
        nll = gold_nll(runner, [it["story"] for it in items])
        out = [{"control": it["control"], "nll": n} for it, n in zip(items, nll)]
        for kind in WRITES[self.opts["control"]]:
            given = [it["control"] for it in items] if kind == "controlled" else None
            for r, story in zip(out, runner.write(firsts, given, cfg=cfg)):
                r[kind] = story["sentences"]
                r.setdefault("empty", 0)
                r.setdefault("truncated", 0)
                r["empty"] += story["empty_sentences"]
                r["truncated"] += sum(st["truncated"] for st in story["steps"])
        return out

    def aggregate(self, results):
        nll, count = sum(r["nll"][0] for r in results), sum(r["nll"][1] for r in results)
        gold = [" ".join(s.sentences) for s in self.examples]
        out = {"ppl": math.exp(nll / count) if count else float("nan")}
        for kind, (inclusion, suffix) in self._names().items():
            texts = [" ".join(r[kind]) for r in results]
            n = max(len(results), 1)
            out.update({f"distinct_4{suffix}": story_distinct(texts, 4), f"repeat_4{suffix}": repeat_n(texts, 4),
                        inclusion: sum(inclusion_share(r["control"], r[kind]) for r in results) / n})
        # an empty sentence is a failure, counted (the writer never returns one but at the model's context limit)
        out.update({"empty_sentences": sum(r.get("empty", 0) for r in results),
                    "truncated_sentences": sum(r.get("truncated", 0) for r in results)})
        return {**out, "gold_distinct_4": story_distinct(gold, 4), "gold_repeat_4": repeat_n(gold, 4),
                "stories": len(results), "target_tokens": count}

    def _names(self) -> dict:
        """Written kind → (its inclusion metric, the suffix of its distinct/repeat metrics): with both kinds
        written, ``inclusion_no_control`` / ``distinct_4`` and ``inclusion_control`` / ``distinct_4_controlled``;
        with one, plain ``inclusion`` / ``distinct_4`` of the stories written."""
        kinds = WRITES[self.opts["control"]]
        if len(kinds) == 1:
            return {kinds[0]: ("inclusion", "")}
        return {"free": ("inclusion_no_control", ""), "controlled": ("inclusion_control", "_controlled")}

    def records(self, results: list[dict], examples) -> list[dict]:
        """Per story (id: the ROCStories story id): ``ppl``'s parts (the gold sentences' summed NLL and token
        count); ``repeat_4`` 0/1 and the inclusion metric (:meth:`_names`) as the story's share of newly
        included keywords (every story has one per sentence 2–5, so the mean of shares is the corpus share),
        for each kind of story written; ``gold_repeat_4`` 0/1. distinct-4 counts unique 4-grams over *all*
        stories, which no story's parts add up to: each record has the story's own ``story_distinct_4``
        instead, and its text in ``prediction`` to recompute the corpus value."""
        out = []
        for s, r in zip(examples, results):
            rec = {"id": str(s.id), "prediction": {**{k: r[k] for k in WRITES[self.opts["control"]]},
                                                   "control": r["control"]},
                   "gold": list(s.sentences), "ppl": {"nll": r["nll"][0], "tokens": r["nll"][1]},
                   "gold_repeat_4": int(has_repeat(words(" ".join(s.sentences)), 4))}
            for kind, (inclusion, suffix) in self._names().items():
                text = " ".join(r[kind])
                rec.update({f"repeat_4{suffix}": int(has_repeat(words(text), 4)),
                            inclusion: inclusion_share(r["control"], r[kind]),
                            f"story_distinct_4{suffix}": story_distinct([text], 4)})
            out.append(rec)
        return out

    def files(self, metrics: dict, records: list[dict], examples: list[dict]) -> dict[str, str]:
        """``stories.jsonl`` beside results.json: each story written without and with the test's control
        (its first sentence, what was written, the control keywords, the gold story), from the records."""
        rows = [{"first": r["gold"][0], **r["prediction"], "gold": r["gold"]} for r in records]
        return {"stories.jsonl": "".join(json.dumps(r) + "\n" for r in rows)}


# Stories a no-argument evaluation writes: each is 8 sampled sentences, 4 keyword predictions and 4 scored gold
# sentences; from SmolLM2-135M that is ~70x the tiny GPT's cost per token, so 24 stories (an estimate from its
# measured training/generation rate single-threaded, docs/story.md) instead of 100 to stay within 10 minutes.
