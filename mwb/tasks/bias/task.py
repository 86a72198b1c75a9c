"""``mwb eval bias``: few-shot instruction prompts for offensive / biased post detection (Prabhumoye et al. 2021).

Data: SBIC CSV files (``--data DIR``, ``--attribute offensiveYN|intentYN|sexYN|whoTarget``) or, with no
``--data``, the bundled RealToxicityPrompts + clean-sentence pool (not SBIC; see :mod:`.data`). Inputs: an
instruction (``--instruction FILE``) + ``--shots K`` examples from the train split chosen by ``--selection``
with ``--seed`` + the query. Objective: the label word ("yes"/"no") with the higher log-likelihood, plain
and calibrated by a content-free input. Metrics: accuracy, macro-F1 (scikit-learn) and per-category
accuracy, for both.
"""
from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np
from tqdm import tqdm

from mwb.evaluation.loading import load_language_model

from ..api.base import Option, Task
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import CUSTOM
from .data import BUNDLED, read_examples
from .label_scoring import LabelScorer
from .prompts import (CONTENT_FREE, PromptFormat, calibrate, label_probs, read_instruction, select_shots,
                      sentence_embeddings)


@register("bias", "sbic")
class BiasTask(Task):
    description = "few-shot instruction prompts for offensive-post detection: label-word log-likelihood, calibration"
    objective = CUSTOM
    default_data = BUNDLED
    eval_split = "test"
    options = {
        "split": Option(str, None, "Split to classify (default test; SBIC: dev or test)."),
        "shots": Option(int, 4, low=0, help="Labelled examples in the prompt."),
        "seed": Option(int, 1, "Seed of the example selection."),
        "selection": Option(str, "random", choices=("random", "balanced", "nearest"),
                            help="How examples are chosen: random, balanced or nearest (MiniLM)."),
        "instruction": Option(str, None, "File holding the instruction text (default: a built-in wording)."),
        "attribute": Option(str, "offensiveYN", choices=("offensiveYN", "intentYN", "sexYN", "whoTarget"),
                            help="SBIC column to predict: offensiveYN, intentYN, sexYN, whoTarget."),
    }

    @classmethod
    def default_checkpoint(cls, say=print) -> str:
        say("no --checkpoint given: prompting smollm2-135m (SmolLM2-135M-Instruct)")
        return "smollm2-135m"

    def load(self, path):
        self.path = self.data_path(path)
        return read_examples(self.path, self.opts["split"] or self.eval_split, self.opts["attribute"])

    def load_model(self, checkpoint, tokenizer=None, device=None):
        return load_language_model(checkpoint, tokenizer, device=device)

    def configs(self) -> list[tuple[int, int]]:
        """The (shots, seed) settings this task scores: one here, a grid in the sweep."""
        return [(self.opts["shots"], self.opts["seed"])]

    def build(self, examples, lm):
        self.examples = examples
        fmt = PromptFormat(instruction=read_instruction(self.opts["instruction"]))
        pool = read_examples(self.path, self.train_split, self.opts["attribute"])
        options = [lm.encode(o) for o in fmt.options]
        nearest = self.opts["selection"] == "nearest"
        vecs = sentence_embeddings([e["text"] for e in pool + examples]) if nearest else None
        items = []
        for shots, seed in self.configs():
            fixed = None if nearest else select_shots(pool, shots, seed, self.opts["selection"])
            for i, e in enumerate(examples):
                chosen = fixed if not nearest else select_shots(pool, shots, seed, "nearest",
                                                                vecs[len(pool) + i], vecs[:len(pool)])
                prefix = lm.encode(fmt.prefix(chosen)) if chosen or fmt.instruction else []
                items.append({"config": (shots, seed), "label": e["label"], "category": e["category"],
                              "prefix": prefix, "query": lm.encode(fmt.example(e["text"])), "options": options,
                              "content_free": [lm.encode(fmt.example(cf)) for cf in CONTENT_FREE]})
        self.items = items
        return items

    def run(self, lm, items):
        cf_cache: dict = {}
        out = []
        score = LabelScorer(lm, items[0]["options"]) if items else None
        for it in tqdm(items, desc="bias prompts", unit="prompt", file=sys.stderr, disable=None):
            p = label_probs(score(it["prefix"], it["query"]))
            key = tuple(it["prefix"])
            if key not in cf_cache:  # fixed shots share one content-free estimate
                cf_cache[key] = np.mean([label_probs(score(it["prefix"], c)) for c in it["content_free"]], axis=0)
            out.append({"config": it["config"], "p": p.tolist(), "p_cf": cf_cache[key].tolist(),
                        "label": it["label"], "category": it["category"]})
        return out

    def aggregate(self, results):
        by_config = defaultdict(list)
        for r in results:
            by_config[tuple(r["config"])].append(r)
        self.per_config = {c: bias_metrics(rs) for c, rs in by_config.items()}
        return self.per_config[self.configs()[0]]

    def records(self, results: list[dict], examples: list[dict]) -> list[dict]:
        """Per query and (shots, seed) prompt: ``accuracy`` and ``calibrated_accuracy`` 0/1,
        ``positive_rate`` / ``calibrated_positive_rate`` (the prediction, 0/1), and ``macro_f1`` /
        ``calibrated_macro_f1`` as the item's confusion cell ``{tp, fp, fn, tn}`` (one of them 1): macro-F1
        averages two classes' F1 over the whole set, so a resample recomputes it from the summed cells; with
        the ``config`` and the ``category`` (whose records aggregate to ``accuracy_<category>``). Id: a hash
        of the post, after ``k<shots>_s<seed>:`` when the task scores several prompts (the sweep)."""
        qids = example_ids(examples, key=None)
        several = len(self.configs()) > 1
        out = []
        for n, r in enumerate(results):
            k, seed = r["config"]
            plain = int(np.argmax(r["p"]))
            cal = int(np.argmax(calibrate(np.array(r["p"]), np.array(r["p_cf"]))))
            qid = qids[n % len(examples)]
            out.append({"id": f"k{k}_s{seed}:{qid}" if several else qid, "prediction": plain, "gold": r["label"],
                        "config": [k, seed], "category": r["category"], "p": r["p"], "p_cf": r["p_cf"],
                        "accuracy": int(plain == r["label"]), "calibrated_accuracy": int(cal == r["label"]),
                        "positive_rate": plain, "calibrated_positive_rate": cal,
                        "macro_f1": confusion_cell(plain, r["label"]),
                        "calibrated_macro_f1": confusion_cell(cal, r["label"])})
        return out


def confusion_cell(prediction: int, gold: int) -> dict:
    """One item's cell of the binary confusion matrix (label 1 = offensive is the positive class)."""
    return {"tp": int(prediction == 1 and gold == 1), "fp": int(prediction == 1 and gold == 0),
            "fn": int(prediction == 0 and gold == 1), "tn": int(prediction == 0 and gold == 0)}


def bias_metrics(results: list[dict]) -> dict:
    """Accuracy, macro-F1 and per-category accuracy of the plain and the calibrated predictions."""
    from sklearn.metrics import accuracy_score, f1_score  # on use: scikit-learn is a second of every start-up

    labels = [r["label"] for r in results]
    preds = {"": [int(np.argmax(r["p"])) for r in results],
             "calibrated_": [int(np.argmax(calibrate(np.array(r["p"]), np.array(r["p_cf"])))) for r in results]}
    out: dict = {}
    for prefix, pred in preds.items():
        out[f"{prefix}accuracy"] = float(accuracy_score(labels, pred))
        out[f"{prefix}macro_f1"] = float(f1_score(labels, pred, average="macro", labels=[0, 1], zero_division=0))
        out[f"{prefix}positive_rate"] = float(np.mean(pred))
    for cat in sorted({r["category"] for r in results}):
        idx = [i for i, r in enumerate(results) if r["category"] == cat]
        for prefix, pred in preds.items():
            out[f"{prefix}accuracy_{cat}"] = float(np.mean([pred[i] == labels[i] for i in idx]))
    out["count"] = len(results)
    return out
