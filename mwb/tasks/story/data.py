"""Five-sentence stories: the ROCStories CSV and the Story Cloze TSV, fixed splits, optional name delexicalisation.

Why one module: the keyword predictor, the knowledge ranker and the generator all train on the same stories
and must never see a test story, so the readers and the split rule live in one place.

Formats (header row required, matched by column name):

* ROCStories CSV (``ROCStories__spring2016 - ROCStories_spring2016.csv``): ``storyid, storytitle,
  sentence1 … sentence5``.
* Story Cloze TSV/CSV (``cloze_test_spring2016_{val,test}.tsv``): ``InputStoryid, InputSentence1 …
  InputSentence4, RandomFifthSentenceQuiz1, RandomFifthSentenceQuiz2, AnswerRightEnding`` (1 or 2): the
  four sentences plus the right ending make a five-sentence story.

Splits are fixed by the story id (the first hex digits of SHA-1 of the id): 80% train, 10% dev, 10% test, so
a story stays in its split whatever files are read together and in which order.
"""
from __future__ import annotations

import csv
import hashlib
import os
import re
from collections import Counter
from dataclasses import dataclass

from mwb.core.errors import DataError

SPLITS = {"train": (0.0, 0.8), "dev": (0.8, 0.9), "test": (0.9, 1.0)}
ROC_COLUMNS = ["storyid"] + [f"sentence{i}" for i in range(1, 6)]
CLOZE_COLUMNS = ["InputStoryid"] + [f"InputSentence{i}" for i in range(1, 5)] + \
    ["RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding"]


@dataclass(frozen=True)
class Story:
    id: str
    sentences: tuple  # five strings
    title: str = ""


def _rows(path: str):
    delim = "\t" if path.endswith(".tsv") else ","
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter=delim)
            header = reader.fieldnames or []
            yield header
            yield from reader
    except FileNotFoundError:
        raise DataError(f"story file not found: {path}") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e})") from None


def read_story_file(path: str) -> list[Story]:
    """The stories of one ROCStories CSV or Story Cloze TSV/CSV (the layout is told by its header)."""
    rows = _rows(path)
    header = next(rows)
    stories = []
    if all(c in header for c in ROC_COLUMNS):
        for n, r in enumerate(rows):
            sents = tuple((r[f"sentence{i}"] or "").strip() for i in range(1, 6))
            stories.append(_checked(Story(r["storyid"], sents, (r.get("storytitle") or "").strip()), path, n))
    elif all(c in header for c in CLOZE_COLUMNS):
        for n, r in enumerate(rows):
            right = (r["AnswerRightEnding"] or "").strip()
            if right not in ("1", "2"):
                raise DataError(f"{path}: row {n + 2}: AnswerRightEnding must be 1 or 2, got {right!r}")
            sents = tuple((r[f"InputSentence{i}"] or "").strip() for i in range(1, 5)) + \
                ((r[f"RandomFifthSentenceQuiz{right}"] or "").strip(),)
            stories.append(_checked(Story(r["InputStoryid"], sents), path, n))
    else:
        raise DataError(f"{path}: not a ROCStories CSV ({', '.join(ROC_COLUMNS)}) nor a Story Cloze file "
                        f"({', '.join(CLOZE_COLUMNS)}); its header is: {', '.join(header) or 'empty'}")
    if not stories:
        raise DataError(f"{path}: no stories (a header and no rows)")
    return stories


def _checked(story: Story, path: str, n: int) -> Story:
    if not story.id or any(not s for s in story.sentences):
        raise DataError(f"{path}: row {n + 2}: a story needs an id and five non-empty sentences")
    return story


def story_files(path: str) -> list[str]:
    """``path`` itself, or the ``.csv``/``.tsv`` files of a directory (sorted)."""
    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith((".csv", ".tsv")))
        if files:
            return files
        raise DataError(f"{path}: no .csv or .tsv story files in this directory")
    raise DataError(f"story data not found: {path}")


def split_of(story_id: str) -> str:
    u = int(hashlib.sha1(story_id.encode()).hexdigest()[:8], 16) / 2 ** 32
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= u < hi)


def read_stories(path: str, split: str = None, delexicalize: bool = False) -> list[Story]:
    """Every story under ``path`` (deduplicated by id), or those of one split; ``delexicalize`` replaces names."""
    if split is not None and split not in SPLITS:
        raise DataError(f"unknown story split '{split}' (train, dev, test)")
    seen, stories = set(), []
    for f in story_files(path):
        for s in read_story_file(f):
            if s.id not in seen:
                seen.add(s.id)
                stories.append(s)
    if delexicalize:
        stories = delexicalize_names(stories)
    return [s for s in stories if split is None or split_of(s.id) == split]


# ---------------------------------------------------------------------------------- delexicalisation

WORD = re.compile(r"[A-Za-z][A-Za-z-]*")  # "Jenny's" → "Jenny" (the "'s" stays as it is)


def name_words(stories: list[Story]) -> set:
    """Capitalised words that are names: written capitalised inside sentences (not first word) more often
    than in lower case anywhere in the corpus ("Rick", "Laverne"; not "The", "Monday" is kept as a name)."""
    upper_inside, lower = Counter(), Counter()
    for s in stories:
        for sent in s.sentences:
            words = WORD.findall(sent)
            for i, w in enumerate(words):
                if w.islower():
                    lower[w] += 1
                elif i > 0 and w[0].isupper() and w[1:].islower():
                    upper_inside[w] += 1
    return {w for w, c in upper_inside.items() if c > lower[w.lower()]}


def delexicalize_names(stories: list[Story], names: set = None) -> list[Story]:
    """Each story with its names replaced by ``[NAME1]``, ``[NAME2]``… in order of first mention."""
    names = name_words(stories) if names is None else names
    out = []
    for s in stories:
        slots: dict = {}

        def sub(m):
            w = m.group(0)
            return slots.setdefault(w, f"[NAME{len(slots) + 1}]") if w in names else w
        out.append(Story(s.id, tuple(WORD.sub(sub, t) for t in s.sentences), s.title))
    return out
