"""``e2e-qa --questions mss``: a question file the evidence answers by construction, made from the evidence.

Why: the real DPR questions that the bundled 1,965 passages "answer" mostly match by chance (a year, a
number, a common word occurs somewhere; ``bundled/README.md``), and only 216 of them name an article the
passages cover, so fewer than 100 would be held out. An end-to-end retriever + reader comparison on them
measures noise. EMDR2's own pretraining signal is the masked salient span (Sachan et al. 2021, after REALM):
:func:`mwb.retrieval.salient_spans.mss_questions` writes one such question per passage (a sentence with a
name or date asked for as "what" / "when"; answers never repeat), and the passage it came from answers it.

The file lists the questions in evidence order, so ``e2e-qa``'s positional split (every 4th held out) is a
split by passage, and it depends on the evidence and ``seed`` only: runs of every training seed read the
same questions, which the two-level test (questions, then seeds) needs. Each record also names its
``passage_id`` and ``title``.
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.core.atomic import atomic_write_jsonl
from mwb.core.errors import DataError

from .inputs import BUNDLED_EVIDENCE, read_evidence
from .salient_spans import mss_questions

MSS = "mss"  # the value of ``mwb finetune e2e-qa --questions`` that asks for this file
FILE = "mss_questions.jsonl"


def evidence_questions(evidence_path: str, seed: int = 0) -> list[dict]:
    """At most one MSS question per passage of ``evidence_path`` (DPR TSV), in evidence order."""
    ev = read_evidence(evidence_path)
    made = sorted(mss_questions(ev.texts, len(ev.texts), seed), key=lambda q: q["passage"])
    if not made:
        raise DataError(f"{evidence_path}: no passage has a sentence with a salient span (a capitalised name or a "
                        "date), so no MSS question can be made")
    return [{"question": q["question"], "answers": q["answers"], "passage_id": ev.ids[q["passage"]],
             "title": ev.titles[q["passage"]]} for q in made]


def mss_question_file(evidence_path: Optional[str], out_dir: str, seed: int = 0) -> tuple[str, int]:
    """(``OUT/mss_questions.jsonl`` made from ``evidence_path`` (the bundled passages when None), how many);
    written with a temporary name and a rename, the same for the same evidence, so a resumed run reads the
    questions it started with."""
    path = os.path.join(out_dir, FILE)
    os.makedirs(out_dir, exist_ok=True)
    return path, atomic_write_jsonl(path, evidence_questions(evidence_path or BUNDLED_EVIDENCE, seed),
                                    ensure_ascii=False)
