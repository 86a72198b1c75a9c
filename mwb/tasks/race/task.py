"""RACE reading comprehension (Lai et al. 2017), as Megatron fine-tunes it.

Reads the official layout ``RACE/{train,dev,test}/{middle,high}/*.txt`` (one JSON per file: ``article``,
``questions``, ``options``, ``answers``, ``id``) or the Hugging Face ``datasets`` RACE rows (``article``,
``question``, ``options``, ``answer``, ``example_id``) from a .jsonl/.json/.parquet file per split. Each
question becomes 4 inputs ``[CLS] article [SEP] question·option [SEP]``: a ``_`` in the question is replaced
by the option, otherwise the option follows the question; the article is truncated so the question and
option stay whole. Metric: accuracy over middle, high and all questions.
"""
from __future__ import annotations

import glob
import os

import numpy as np

from mwb.core.errors import DataError

from mwb.evaluation.task_data import load_records

from ..api.base import MetricSpec, Task, pair_inputs
from ..api.formats.checks import read_json, shown, text
from ..api.formats.splits import find_file, with_extensions
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import MULTIPLE_CHOICE

SAMPLE = os.path.join(os.path.dirname(__file__), "bundled", "race_sample")
LETTERS = "ABCD"


def _check(example: dict, where: str) -> None:
    for field, kind in (("article", str), ("questions", list), ("options", list), ("answers", list)):
        if not isinstance(example.get(field), kind):
            raise DataError(f"{where}: field '{field}' is missing or not a {kind.__name__}")
    n = len(example["questions"])
    if len(example["options"]) != n or len(example["answers"]) != n:
        raise DataError(f"{where}: field 'options'/'answers' must have one entry per question ({n})")
    if n == 0:
        raise DataError(f"{where}: field 'questions' is empty")
    for i, (q, opts, ans) in enumerate(zip(example["questions"], example["options"], example["answers"])):
        if not isinstance(q, str):
            raise DataError(f"{where}: field 'questions'[{i}] must be a string, got {shown(q)}")
        if not isinstance(opts, list) or len(opts) != 4 or not all(isinstance(o, str) for o in opts):
            raise DataError(f"{where}: field 'options'[{i}] must list 4 option strings, got {shown(opts)}")
        if not isinstance(ans, str) or len(ans) != 1 or ans not in LETTERS:  # "" or "AB" is not an answer
            raise DataError(f"{where}: field 'answers'[{i}] must be one of A-D, got {shown(ans)}")


def read_official(split_dir: str) -> list[dict]:
    """One example per question from ``split_dir/{middle,high}/*.txt``."""
    out = []
    files = sorted(glob.glob(os.path.join(split_dir, "*", "*.txt")))
    if not files:
        raise DataError(f"no RACE files under {split_dir}/{{middle,high}}/*.txt")
    for path in files:
        level = os.path.basename(os.path.dirname(path))
        ex = read_json(path)
        if not isinstance(ex, dict):
            raise DataError(f"{path}: expected a JSON object with article/questions/options/answers")
        _check(ex, path)
        for i, q in enumerate(ex["questions"]):
            out.append({"id": f"{level}/{os.path.basename(path)}#{i}", "level": level, "article": ex["article"],
                        "question": q, "options": ex["options"][i], "label": LETTERS.index(ex["answers"][i])})
    return out


def read_hf_rows(path: str) -> list[dict]:
    """Rows in the ``datasets`` RACE schema (one question per row)."""
    out = []
    for n, row in enumerate(load_records(path)):
        where = f"{path}: row {n + 1}"
        ex = {"article": row.get("article"), "questions": [row.get("question")], "options": [row.get("options")],
              "answers": [row.get("answer")]}
        _check(ex, where)
        example_id = text(row, "example_id", where, default=str(n))
        level = "high" if example_id.startswith("high") else "middle"
        out.append({"id": example_id, "level": level, "article": ex["article"],
                    "question": ex["questions"][0], "options": list(ex["options"][0]),
                    "label": LETTERS.index(ex["answers"][0])})
    return out


def option_text(question: str, option: str) -> str:
    return question.replace("_", option) if "_" in question else f"{question} {option}"


@register("race")
class Race(Task):
    description = "RACE reading comprehension: 4-way multiple choice, accuracy (middle, high, all)"
    objective = MULTIPLE_CHOICE
    num_labels = 4
    metric = "accuracy"
    default_data = SAMPLE

    def read(self, path: str, split: str) -> list[dict]:
        split_dir = os.path.join(path, split)
        if os.path.isdir(split_dir):
            return read_official(split_dir)
        f = find_file(path, with_extensions(split, (".jsonl", ".json", ".parquet")))
        if f is not None:
            return read_hf_rows(f)
        if os.path.isfile(path) and split in os.path.basename(path):
            return read_hf_rows(path)
        raise DataError(f"RACE split '{split}' not found under {path} (expected {split}/{{middle,high}}/*.txt "
                        f"or {split}.jsonl/.parquet)")

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        article = tokenizer.encode(example["article"])
        rows = [pair_inputs(article, tokenizer.encode(option_text(example["question"], o)), tokenizer, seq_length)
                for o in example["options"]]
        out = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        out["label"] = np.array(example["label"], dtype=np.int64)
        return out

    metric_specs = tuple(spec for level in ("middle", "high", None) for spec in (
        MetricSpec(f"accuracy_{level}" if level else "accuracy", "mean", field="accuracy",
                   where=("level", level) if level else None),
        MetricSpec(f"count_{level or 'all'}", "count", where=("level", level) if level else None)))

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per question (id: ``level/file#question`` in the official layout, the row's ``example_id`` in the
        Hugging Face one): ``accuracy`` 0/1 and the ``level``, so the records of one level aggregate to its
        ``accuracy_middle`` / ``accuracy_high``."""
        return [{"id": i, "prediction": int(p), "gold": int(e["label"]), "level": e["level"],
                 "accuracy": int(p == e["label"])} for i, p, e in zip(example_ids(examples), preds, examples)]
