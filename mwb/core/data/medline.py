"""MEDLINE/PubMed citation XML (the NLM baseline files ``pubmedYYnNNNN.xml.gz``): one document per citation.

Why a reader of its own: BioMegatron and PubMedBERT pretrain on PubMed titles + abstracts, and NLM ships them
as ``PubmedArticleSet`` XML, not JSONL. The file is streamed (``iterparse``, each citation cleared after
use), so memory stays flat for a full 30,000-citation baseline file. A citation without an abstract is
skipped (a title alone is not a document worth pretraining on). Structured abstracts (several
``AbstractText`` sections) are joined with spaces; inline markup (``<i>``, ``<sup>``) keeps its text.
Besides the text, each record carries the citation's ``ChemicalList`` names and MeSH descriptors, which the
silver chemical-NER builder uses.
"""
from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
from typing import Iterator

from mwb.core.errors import DataError


def _text(elem) -> str:
    return " ".join("".join(elem.itertext()).split()) if elem is not None else ""


def citation(article) -> dict:
    """``{"pmid", "title", "abstract", "text", "chemicals", "mesh"}`` of one ``PubmedArticle`` element."""
    cit = article.find("MedlineCitation")
    if cit is None:
        cit = article
    title = _text(cit.find("Article/ArticleTitle"))
    abstract = " ".join(t for t in (_text(a) for a in cit.findall("Article/Abstract/AbstractText")) if t)
    return {"pmid": _text(cit.find("PMID")), "title": title, "abstract": abstract,
            "text": f"{title}\n{abstract}" if title else abstract,
            "chemicals": [_text(c) for c in cit.findall("ChemicalList/Chemical/NameOfSubstance")],
            "mesh": [_text(m) for m in cit.findall("MeshHeadingList/MeshHeading/DescriptorName")]}


def iter_medline(path: str, with_abstract: bool = True) -> Iterator[dict]:
    """The citations of a MEDLINE XML file (``.xml`` or ``.xml.gz``), in file order, each as :func:`citation`
    returns it; ``with_abstract`` skips those without an abstract."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            events = ET.iterparse(f, events=("start", "end"))
            _, root = next(events)
            if root.tag != "PubmedArticleSet":
                raise DataError(f"{path}: not MEDLINE XML (the root element is <{root.tag}>, expected "
                                f"<PubmedArticleSet>)")
            for event, elem in events:
                if event == "end" and elem.tag == "PubmedArticle":
                    rec = citation(elem)
                    root.clear()
                    if rec["abstract"] or not with_abstract:
                        yield rec
    except ET.ParseError as e:
        raise DataError(f"{path}: malformed XML ({e})") from None
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
