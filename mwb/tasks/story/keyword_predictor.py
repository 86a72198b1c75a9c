"""The keyword predictor: a GPT fine-tuned on story so far → the next sentence's RAKE keywords.

Data: ROCStories (CSV or Story Cloze TSV; default: the 3,742 stories in ConceptNet 5.7.0's sdist), the
fixed id-hash splits of :mod:`.data`. Each story gives four examples, one per sentence after the first.
Inputs: ``"<story so far>\\nKeywords:"`` → ``" a, b"`` (the two best RAKE phrases of the next sentence).
Objective: generative (target tokens only). Metrics: keyword-set F1 and exact match of greedy predictions.
"""
from __future__ import annotations

from mwb.core.data.package_files import package_path

from ..api.base import MetricSpec, Option, Task
from ..api.formats.checks import nonempty
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import GENERATIVE
from .data import read_stories
from .keywords import format_keywords, parse_keywords, sentence_keywords

KEYWORDS_PER_SENTENCE = 2


def next_sentence_examples(stories, keywords_per_sentence: int = KEYWORDS_PER_SENTENCE) -> list[dict]:
    """Per story, sentence i = 2..5: the sentences before it, it, and its RAKE keywords."""
    return [{"id": f"{s.id}:{i}", "story": s.id, "position": i, "context": " ".join(s.sentences[:i]), "target": s.sentences[i],
             "keywords": sentence_keywords(s.sentences[i], keywords_per_sentence)}
            for s in stories for i in range(1, 5)]


def keyword_prompt(context: str) -> str:
    return f"{context}\nKeywords:"


@register("story-keywords")
class StoryKeywords(Task):
    description = "MEGATRON-CNTRL keyword predictor: story so far → next sentence's RAKE keywords (GPT)"
    objective = GENERATIVE
    metric = "dev_loss"
    options = {**Task.options,
               "max_tokens": Option(int, 12, low=1, help="Longest generated keyword list, in tokens."),
               "first_line": Option(bool, True, "Keep only the first line of each generation."),
               "stories": Option(int, 200, low=0,
                                 help="Use only the first N stories of the training split (0: all 2,994; the "
                                      "default 200 matches `mwb finetune story` and finishes in minutes on 2 "
                                      "cores)."),
               "dev_stories": Option(int, 32, low=0, help="Use only the first N stories of the dev split (0: all)."),
               "delexicalize": Option(bool, False, "Replace character names by [NAME1], [NAME2], …")}

    def data_path(self, path):
        return path or package_path("rocstories")

    def read(self, path: str, split: str) -> list[dict]:
        stories = read_stories(path, split, delexicalize=self.opts["delexicalize"])
        limit = self.opts["stories"] if split == "train" else self.opts["dev_stories"] if split == "dev" else 0
        return nonempty(next_sentence_examples(stories[:limit] if limit else stories), path,
                        f"next-sentence examples in split '{split}'")

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        return {"prompt": keyword_prompt(example["context"]), "target": " " + format_keywords(example["keywords"])}

    metric_specs = (MetricSpec("keyword_f1", "mean", empty=0.0), MetricSpec("exact_match", "mean", empty=0.0),
                    MetricSpec("count", "count"))

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per next sentence (id: ``story:position``): set ``keyword_f1`` of the
        predicted keywords against the sentence's RAKE keywords and ``exact_match`` (the same set)."""
        out = []
        for i, p, e in zip(example_ids(examples), preds, examples):
            got, gold = set(parse_keywords(p)), set(e["keywords"])
            hit = len(got & gold)
            out.append({"id": i, "prediction": sorted(got), "gold": sorted(gold),
                        "keyword_f1": 0.0 if not hit else 2 * hit / (len(got) + len(gold)),
                        "exact_match": float(got == gold)})
        return out
