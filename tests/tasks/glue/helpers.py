"""GLUE-layout files made in the test: MNLI with every official column, and an easy STS-B / SST-2 set."""
from __future__ import annotations

import os

import numpy as np

MNLI_TRAIN = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
              "sentence2_parse sentence1 sentence2 label1 gold_label").split()
MNLI_DEV = MNLI_TRAIN[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
MNLI_TEST = MNLI_TRAIN[:-2]
NLI = ["entailment", "neutral", "contradiction"]
GRADES = ["bad", "poor", "fine", "good", "great"]
WORDS = "red blue green cat dog bird tree river stone house lamp chair".split()


def write_tsv(path: str, header, rows) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if header:
            f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(str(c) for c in r) + "\n")
    return path


def mnli_row(header, i: int, s1: str, s2: str, label: str) -> list:
    values = {"index": i, "promptID": 1000 + i, "pairID": f"{1000 + i}e", "genre": "fiction",
              "sentence1": s1, "sentence2": s2, "gold_label": label}
    return [values.get(c, f"( ( {s1} ) )" if "parse" in c else label) for c in header]


def write_mnli(root: str, n: int = 6) -> str:
    """``root/MNLI/{train,dev_matched,dev_mismatched,test_matched}.tsv`` with MNLI's full headers."""
    d = os.path.join(root, "MNLI")
    for split, header in (("train", MNLI_TRAIN), ("dev_matched", MNLI_DEV), ("dev_mismatched", MNLI_DEV),
                          ("test_matched", MNLI_TEST)):
        rows = [mnli_row(header, i, f'The {split} "quoted man {i} sleeps.', f"A man {i} rests.", NLI[i % 3])
                for i in range(n)]
        write_tsv(os.path.join(d, f"{split}.tsv"), header, rows)
    return d


def write_easy_stsb(d: str, sizes=(("train", 48), ("dev", 16), ("test", 4)), seed: int = 0) -> str:
    """STS-B layout; the score is set by sentence2's one word (bad 0 … great 5): learnable in a few steps."""
    rng = np.random.default_rng(seed)
    header = "index genre filename year old_index source1 source2 sentence1 sentence2 score".split()
    for split, n in sizes:
        rows = []
        for i in range(n):
            a = list(rng.choice(WORDS, 4, replace=False))
            k = int(rng.integers(0, 5))
            b = [GRADES[k]]
            row = [i, "main-captions", "MSRvid", "2012test", i, "none", "none", " ".join(a), " ".join(b),
                   f"{5 * k / 4:.3f}"]
            rows.append(row if split != "test" else row[:-1])
        write_tsv(os.path.join(d, f"{split}.tsv"), header if split != "test" else header[:-1], rows)
    return d
