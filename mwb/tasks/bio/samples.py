"""Small ChemProt-format and BioASQ-format sets written from templates: the bundled defaults of
``mwb finetune chemprot|bioasq`` and learnable sets for the tests. They are **not** ChemProt or BioASQ.

ChemProt (BLUE layout): each row is a sentence with ``@CHEMICAL$`` and ``@GENE$`` whose verb phrase says the
relation (``inhibits`` → CPR:4, ``is an agonist of`` → CPR:5, …); ``false`` rows put the two in a sentence
that states no relation. BioASQ (BioBERT layout): one SQuAD-format JSON per split whose question ids are a
24-character question id plus ``_NNN`` per snippet, each question with 2–3 snippets that name the answer
(the gene a drug targets), and a golden file in BioASQ's format (``exact_answer`` as synonym lists).
Drug and gene names are invented-looking strings, so nothing comes from the real corpora. Deterministic
from the seed.
"""
from __future__ import annotations

import csv
import json
import os
import random

CHEM_VERBS = {
    "CPR:3": ["increases the expression of", "activates", "up-regulates", "induces"],
    "CPR:4": ["inhibits", "suppresses", "blocks the activity of", "down-regulates"],
    "CPR:5": ["is an agonist of", "acts as an agonist at"],
    "CPR:6": ["is an antagonist of", "antagonizes"],
    "CPR:9": ["is metabolized by", "is a substrate of"],
    "false": ["was measured together with", "and the levels of", "was studied in patients with altered"],
}
OPENERS = ["In rat liver cells,", "In this study,", "We show that", "Our data indicate that", "In vitro,"]
ENDINGS = ["in a dose-dependent manner.", "in cultured cells.", "after 24 h.", "."]
DRUGS = ["zelavarin", "mocetrine", "tadopril", "quinazepam", "ferumab", "lorivastin", "penoxate", "dulicillin",
         "bratinib", "corvatide", "ximelol", "hepatrone"]
GENES = ["KRT-7", "CYP3A9", "TPK2", "MAPX1", "HRG-4", "SLC9Q", "ZNF77", "BRCX2", "GPR311", "ADRB5", "NOX8",
         "PLK-9"]
SNIPPETS = ["{drug} binds {gene} with high affinity.", "The main target of {drug} is {gene}.",
            "Treatment with {drug} reduced {gene} activity in patients.",
            "{gene} is the receptor through which {drug} acts."]


def chemprot_rows(n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    rows = []
    labels = list(CHEM_VERBS)
    for i in range(n):
        label = labels[i % len(labels)] if i < len(labels) else rng.choice(labels + ["false"])
        verb = rng.choice(CHEM_VERBS[label])
        sentence = f"{rng.choice(OPENERS)} @CHEMICAL$ {verb} @GENE$ {rng.choice(ENDINGS)}"
        if rng.random() < 0.05:  # an overlapping mention (a chemical that is also a gene product)
            label, sentence = "false", f"{rng.choice(OPENERS)} @CHEM-GENE$ levels were measured {rng.choice(ENDINGS)}"
        rows.append((str(i), sentence, label))
    return rows


def write_chemprot_sample(root: str, sizes: dict, seed: int = 0) -> str:
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for split, n in sizes.items():
        with open(os.path.join(root, f"{split}.tsv"), "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
            w.writerow(["index", "sentence", "label"])
            w.writerows(chemprot_rows(n, rng))
    return root


def bioasq_split(n: int, rng: random.Random, split: str) -> tuple[dict, list[dict]]:
    """(SQuAD-format JSON, golden questions) for ``n`` questions of ``split``."""
    paragraphs, golden = [], []
    for q in range(n):
        qid = f"{split[:2]}{q:04d}".ljust(24, "0")  # 24 characters, as BioASQ ids
        drug, gene = rng.choice(DRUGS), rng.choice(GENES)
        question = f"Which gene does {drug} target?"
        for s, template in enumerate(rng.sample(SNIPPETS, rng.randint(2, 3))):
            context = template.format(drug=drug, gene=gene)
            start = context.index(gene)
            paragraphs.append({"context": context, "qas": [{"id": f"{qid}_{s:03d}", "question": question,
                                                            "answers": [{"text": gene, "answer_start": start}]}]})
        golden.append({"id": qid, "type": "factoid", "body": question,
                       "exact_answer": [[gene, gene.replace("-", "")]]})
    return {"version": "BioASQ-sample", "data": [{"title": "BioASQ-sample", "paragraphs": paragraphs}]}, golden


def write_bioasq_sample(root: str, sizes: dict, seed: int = 0) -> str:
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for split, n in sizes.items():
        squad, golden = bioasq_split(n, rng, split)
        with open(os.path.join(root, f"{split}.json"), "w", encoding="utf-8") as f:
            json.dump(squad, f, indent=1)
        with open(os.path.join(root, f"{split}_golden.json"), "w", encoding="utf-8") as f:
            json.dump({"questions": golden}, f, indent=1)
    return root


if __name__ == "__main__":  # regenerate the bundled samples: python -m mwb.tasks.bio.samples
    here = os.path.join(os.path.dirname(__file__), "bundled")
    write_chemprot_sample(os.path.join(here, "chemprot_sample"), {"train": 120, "dev": 48, "test": 48})
    write_bioasq_sample(os.path.join(here, "bioasq_sample"), {"train": 40, "dev": 16, "test": 16})
