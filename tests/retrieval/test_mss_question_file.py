"""``e2e-qa --questions mss``: one masked-salient-span question per passage, in evidence order, each answered
by the passage it came from (DPR's has-answer rule), the same file for the same evidence and seed."""
from __future__ import annotations

import gzip
import re

import pytest

from mwb.core.errors import DataError
from mwb.retrieval.e2e.train import HELD_OUT_EVERY, split_questions
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, read_evidence, read_questions
from mwb.retrieval.matching import has_answer
from mwb.retrieval.mss_question_file import FILE, evidence_questions, mss_question_file


@pytest.fixture(scope="module")
def bundled():
    return read_evidence(BUNDLED_EVIDENCE), evidence_questions(BUNDLED_EVIDENCE)


def test_each_question_is_answered_by_its_own_passage_and_asks_for_what_it_removed(bundled):
    ev, qs = bundled
    row = {pid: i for i, pid in enumerate(ev.ids)}
    for q in qs:
        text = ev.texts[row[q["passage_id"]]]
        assert q["title"] == ev.titles[row[q["passage_id"]]]
        assert has_answer(q["answers"], text), q
        assert q["answers"][0] in text, q
        assert not re.search(rf"(?<!\w){re.escape(q['answers'][0])}(?!\w)", q["question"], re.IGNORECASE), q
        assert q["question"].endswith("?") and re.search(r"\b(?:what|when)\b", q["question"]), q


def test_order_is_the_evidences_so_every_4th_held_out_is_a_split_by_passage(bundled):
    ev, qs = bundled
    rows = [ev.ids.index(q["passage_id"]) for q in qs]
    assert rows == sorted(rows) and len(set(rows)) == len(rows)  # one question per passage at most
    assert len({q["answers"][0] for q in qs}) == len(qs)  # answers never repeat
    train, held = split_questions(qs)
    assert len(held) == len(qs) // HELD_OUT_EVERY >= 100  # the e2e-odqa cpu scale's "238 held-out questions"
    assert len(held) == 238 and len(qs) == 955
    assert not {q["passage_id"] for q in held} & {q["passage_id"] for q in train}


def test_same_evidence_and_seed_give_the_same_file_another_seed_another(tmp_path, bundled):
    path, n = mss_question_file(None, str(tmp_path / "a"))
    again, m = mss_question_file(BUNDLED_EVIDENCE, str(tmp_path / "b"))
    assert path.endswith(FILE) and n == m == len(bundled[1])
    assert open(path, "rb").read() == open(again, "rb").read()
    back = read_questions(path)  # the reader e2e-qa uses keeps the extra fields
    assert [(q["question"], q["answers"], q["passage_id"]) for q in back] == \
        [(q["question"], q["answers"], q["passage_id"]) for q in bundled[1]]
    assert evidence_questions(BUNDLED_EVIDENCE, seed=1) != bundled[1]


def test_evidence_without_salient_spans_is_one_clear_error(tmp_path):
    p = tmp_path / "ev.tsv.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write("id\ttext\ttitle\n1\tthe cat sat on the mat and looked at the door for a long while.\tcats\n")
    with pytest.raises(DataError, match="no MSS question can be made"):
        evidence_questions(str(p))
