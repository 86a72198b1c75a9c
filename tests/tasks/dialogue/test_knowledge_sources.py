"""Named knowledge sources: 'bundled' and None are the bundled Wikipedia passages, a path is itself, and
'wordnet' is WordNet 3.0's glosses as a DPR-format passages TSV that the retrievers read."""
import pytest

from mwb.retrieval.bm25 import BM25Retriever
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, Evidence, read_evidence
from mwb.tasks.dialogue.knowledge_sources import knowledge_path
from tests.helpers.needs import needs


def test_names_and_paths():
    assert knowledge_path(None) == knowledge_path("bundled") == BUNDLED_EVIDENCE
    assert knowledge_path("/some/kb.tsv") == "/some/kb.tsv"


@needs(data=["wordnet"])
def test_wordnet_glosses_are_passages_one_per_synset():
    path = knowledge_path("wordnet")
    assert knowledge_path("wordnet") == path  # built once, then reused
    ev = read_evidence(path)
    assert len(ev) == 117659  # WordNet 3.0's synsets, all parts of speech
    humid = [i for i, t in enumerate(ev.titles) if t == "humidity"]
    assert humid and ev.texts[humid[0]].startswith("humidity, humidness: wetness in the atmosphere")
    assert all("\t" not in t and "\n" not in t for t in ev.texts[:1000])
    # a chitchat line finds its everyday topic among a few glosses
    keep = [i for i, t in enumerate(ev.titles) if t in ("humidity", "telegraph", "dog", "pizza", "school")]
    some = Evidence(path, [ev.ids[i] for i in keep], [ev.texts[i] for i in keep], [ev.titles[i] for i in keep])
    _, rows = BM25Retriever(some).search(["yeah its a lot warmer down south, I love the humidity"], 1)
    assert some.titles[int(rows[0][0])] == "humidity"
