"""MEDLINE XML: title + abstract per citation (structured abstracts, inline markup, no-abstract skipped),
chemicals and MeSH kept, and `mwb preprocess --input file.xml.gz` writes one document per abstract."""
import gzip

import pytest

from mwb.core.data.indexed import IndexedDataset
from mwb.core.data.medline import iter_medline
from mwb.core.errors import DataError
from tests.core.data.test_data_cli import run

XML = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2019//EN" "pubmed_190101.dtd">
<PubmedArticleSet>
  <PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="1">101</PMID>
    <Article PubModel="Print"><ArticleTitle>Cisplatin nephrotoxicity in rats.</ArticleTitle>
      <Abstract><AbstractText Label="BACKGROUND">Cisplatin causes <i>renal</i> injury.</AbstractText>
        <AbstractText Label="RESULTS">Magnesium   reduced it.</AbstractText></Abstract></Article>
    <ChemicalList><Chemical><RegistryNumber>Q20Q21Q62J</RegistryNumber>
      <NameOfSubstance UI="D002945">Cisplatin</NameOfSubstance></Chemical>
      <Chemical><RegistryNumber>I38ZP9992A</RegistryNumber><NameOfSubstance UI="D008274">Magnesium</NameOfSubstance>
      </Chemical></ChemicalList>
    <MeshHeadingList><MeshHeading><DescriptorName UI="D000818">Animals</DescriptorName></MeshHeading>
    </MeshHeadingList></MedlineCitation></PubmedArticle>
  <PubmedArticle><MedlineCitation><PMID Version="1">102</PMID>
    <Article><ArticleTitle>A title without an abstract.</ArticleTitle></Article></MedlineCitation></PubmedArticle>
  <PubmedArticle><MedlineCitation><PMID Version="1">103</PMID>
    <Article><ArticleTitle>Second.</ArticleTitle><Abstract><AbstractText>Plain abstract.</AbstractText></Abstract>
    </Article></MedlineCitation></PubmedArticle>
</PubmedArticleSet>
"""


def test_reads_title_abstract_chemicals_and_mesh(tmp_path):
    path = tmp_path / "pubmed_sample.xml.gz"
    path.write_bytes(gzip.compress(XML.encode()))
    recs = list(iter_medline(str(path)))
    assert [r["pmid"] for r in recs] == ["101", "103"]
    assert recs[0]["text"] == "Cisplatin nephrotoxicity in rats.\nCisplatin causes renal injury. Magnesium reduced it."
    assert recs[0]["chemicals"] == ["Cisplatin", "Magnesium"] and recs[0]["mesh"] == ["Animals"]
    assert len(list(iter_medline(str(path), with_abstract=False))) == 3


def test_preprocess_recognises_medline_xml(tmp_path, capsys, tok_path, tok):
    path = tmp_path / "pubmed_sample.xml.gz"
    path.write_bytes(gzip.compress(XML.encode()))
    prefix = str(tmp_path / "out" / "pm")
    code, out, err = run(["preprocess", "--input", str(path), "--output-prefix", prefix, "--tokenizer", tok_path,
                          "--append-eod"], capsys)
    assert code == 0, err
    ix = IndexedDataset(f"{prefix}_text_document")
    assert ix.num_documents == 2
    assert tok.decode(ix.document(1)) == "Second.\nPlain abstract.<|endoftext|>"


@pytest.mark.parametrize("content,needle", [("<html><body/></html>", "not MEDLINE XML"),
                                            ("<PubmedArticleSet><PubmedArticle>", "malformed XML")])
def test_bad_xml_is_a_data_error(tmp_path, content, needle):
    path = tmp_path / "bad.xml"
    path.write_text(content)
    with pytest.raises(DataError, match=needle):
        list(iter_medline(str(path)))


def test_named_pubmed_data_builds_sentences_with_a_learned_vocabulary(tmp_path, monkeypatch):
    """``--data pubmed``: a WordPiece learned from the abstracts, sentence-level .bin/.idx, both cached;
    pretraining's data step resolves the name (here on the sample instead of the package file)."""
    from mwb.core.data import pubmed
    from mwb.core.tokenizers import load_tokenizer

    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "pubmed_sample.xml.gz"
    path.write_bytes(gzip.compress(XML.encode()))
    monkeypatch.setitem(pubmed.NAMED, "pubmed", pubmed.PubmedData("pubmed", "learned", False, vocab_size=120))
    monkeypatch.setattr(pubmed, "medline_file", lambda name=pubmed.TRAIN_FILE: str(path))
    prefixes, tok_path = pubmed.named_data("pubmed")
    tok = load_tokenizer(tok_path)
    ix = IndexedDataset(prefixes[0])
    assert ix.num_documents == 2 and len(ix) == 5  # title + 2 sentences, title + 1 sentence
    assert tok.decode(ix[0]).replace(" ", "") == "Cisplatinnephrotoxicityinrats."
    assert pubmed.named_data("pubmed") == (prefixes, tok_path)  # reused from the cache

    from mwb.core.config import RunConfig, update
    from mwb.pretraining.run import prepare_data
    plan = prepare_data(update(RunConfig(), {"model": {"arch": "bert"}, "data": {"data": ["pubmed"]}}))
    assert plan.data == prefixes and plan.tokenizer.startswith(tok_path)
    with pytest.raises(DataError, match="unknown named data"):
        pubmed.named_data("pubmed-nope")
