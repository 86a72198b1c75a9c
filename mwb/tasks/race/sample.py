"""A small RACE-format set written from templates: the bundled default for ``mwb finetune race`` and a
learnable multiple-choice set for tests.

Each article is a short story built from random names, places, goods and relatives; each question asks for
one of those facts, by wh-question or by a ``_`` blank (both RACE styles). The right option appears in the
article and the three distractors come from the same word list but not from the article, so the task can
be learned by matching the option against the passage: a fine-tuned model should reach well above the 25%
chance level. Everything is deterministic from the seed; the text is generated here (no licence concerns).
"""
from __future__ import annotations

import json
import os
import random

NAMES = ["Lucy", "Sam", "Maria", "Tom", "Anna", "Peter", "Grace", "Jack", "Emma", "Henry", "Alice", "Ben",
         "Clara", "David", "Ella", "Frank"]
PLACES = ["market", "library", "park", "museum", "harbour", "station", "bakery", "garden", "school", "farm",
          "beach", "castle"]
GOODS = ["apples", "bread", "cheese", "flowers", "candles", "books", "eggs", "honey", "lemons", "rice", "soap",
         "tea"]
KIN = ["grandmother", "uncle", "teacher", "neighbour", "cousin", "aunt", "doctor", "grandfather"]
# Words that never appear in an article: with ``easy=True`` distractors come only from here, a cue a small
# model learns in a few epochs (the tests' "learnable" set).
NEVER = ["violins", "glaciers", "tigers", "rockets", "pyramids", "volcanoes", "dolphins", "cactuses",
         "planets", "kites", "anchors", "lanterns"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _options(rng: random.Random, right: str, pool: list[str], used: set[str]) -> tuple[list[str], str]:
    wrong = rng.sample([w for w in pool if w not in used and w != right and w.strip(".") != right], 3)
    opts = wrong + [right]
    rng.shuffle(opts)
    return opts, "ABCD"[opts.index(right)]


def make_article(rng: random.Random, easy: bool = False) -> dict:
    a, b = rng.sample(NAMES, 2)
    place, place2 = rng.sample(PLACES, 2)
    good, good2 = rng.sample(GOODS, 2)
    kin = rng.choice(KIN)
    day = rng.choice(DAYS)
    article = (f"{a} lives in a small town near the river. Every {day} {a} walks to the {place} with a friend "
               f"called {b}. This week {a} bought {good} and {b} bought {good2}. After that they went to the "
               f"{place2}, and in the evening they visited {a}'s {kin}, who told them old stories about the town.")
    used = {a, b, place, place2, good, good2, kin, day}
    qs = [(f"What did {a} buy this week?", good, GOODS),
          (f"Where does {a} walk every {day}?", f"To the {place}.", [f"To the {p}." for p in PLACES]),
          (f"In the evening they visited {a}'s _.", kin, KIN),
          (f"{a} usually goes out with _.", b, NAMES)]
    questions, options, answers = [], [], []
    for q, right, pool in rng.sample(qs, 2):
        used_here = used | {f"To the {p}." for p in (place, place2)}
        opts, ans = _options(rng, right, NEVER if easy else pool, used_here)
        questions.append(q)
        options.append(opts)
        answers.append(ans)
    return {"article": article, "questions": questions, "options": options, "answers": answers}


def write_race_sample(root: str, counts: dict[str, int], seed: int = 0, easy: bool = False) -> str:
    """Write ``root/{split}/{middle,high}/N.txt`` with ``counts[split]`` articles per split."""
    rng = random.Random(seed)
    for split, n in counts.items():
        for i in range(n):
            level = "middle" if i % 2 == 0 else "high"
            d = os.path.join(root, split, level)
            os.makedirs(d, exist_ok=True)
            ex = make_article(rng, easy)
            ex["id"] = f"{level}{i}.txt"
            with open(os.path.join(d, f"{i}.txt"), "w", encoding="utf-8") as f:
                json.dump(ex, f)
    return root


if __name__ == "__main__":  # regenerate the bundled sample: python -m mwb.tasks.race.sample
    here = os.path.join(os.path.dirname(__file__), "bundled", "race_sample")
    write_race_sample(here, {"train": 96, "dev": 24, "test": 24}, seed=2024)
    print(f"wrote {here}")
