"""BioASQ factoid: n-best pooling, SAcc/LAcc/MRR on a toy golden file, span inputs ↔ answer text."""
import json

import numpy as np
import pytest

from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.bio.bioasq_metrics import factoid_scores, pool_answers, read_golden
from mwb.tasks.bio.bioasq import BioASQ
from mwb.core.data.spans import nbest_spans, span_inputs
from tests.tasks.encoder_helpers import TOKENIZER


def test_pooling_merges_case_insensitive_duplicates_and_drops_empty_and_long():
    cands = [("BRCA1", 0.3), ("TP53", 0.35), ("brca1", 0.2), ("", 0.9), ("x" * 101, 0.8), ("EGFR", 0.1),
             ("a", 0.05), ("b", 0.04), ("c", 0.03), (" TP53 ", 0.01)]
    # BRCA1 0.5 (two spellings, the first kept), TP53 0.36, EGFR, a, b; c is 6th
    assert pool_answers(cands) == ["BRCA1", "TP53", "EGFR", "a", "b"]


def test_strict_lenient_mrr_on_a_toy_golden_file(tmp_path):
    golden = {"questions": [
        {"id": "q1", "type": "factoid", "exact_answer": [["BRCA1", "breast cancer 1"]]},
        {"id": "q2", "type": "factoid", "exact_answer": [["TP53", "p53"], ["tumor protein 53"]]},
        {"id": "q3", "type": "factoid", "exact_answer": ["EGFR"]},
        {"id": "q4", "type": "factoid", "exact_answer": "insulin"},
    ]}
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(golden))
    gold = read_golden(str(path))
    assert gold["q2"] == ["TP53", "p53", "tumor protein 53"]
    preds = {"q1": ["Breast Cancer 1", "x"],          # rank 1 (synonym, case-insensitive)
             "q2": ["a", "b", "P53"],                 # rank 3
             "q3": ["a", "b", "c", "d", "e", "EGFR"],  # rank 6: outside the top 5
             }                                         # q4: no prediction
    got = factoid_scores(preds, gold)
    assert got["strict_accuracy"] == 1 / 4 and got["lenient_accuracy"] == 2 / 4
    assert got["mrr"] == pytest.approx((1 + 1 / 3) / 4) and got["questions"] == 4
    path.write_text(json.dumps({"questions": [{"id": "q1"}]}))
    with pytest.raises(DataError, match="exact_answer"):
        read_golden(str(path))


def test_span_inputs_label_and_nbest_recover_the_answer_text():
    tok = load_tokenizer(TOKENIZER)
    context = "Treatment with zelavarin reduced KRT-7 activity (in vitro)."
    f = span_inputs("Which gene does zelavarin target?", context, context.index("KRT-7"), "KRT-7", tok, 64)
    s, e = f["label"].tolist()
    assert 0 < s <= e and context[f["char_start"][s]:f["char_end"][e]] == "KRT-7"
    logits = np.zeros((64, 2))
    logits[s, 0] = logits[e, 1] = 10.0
    spans = nbest_spans(logits, f)
    assert context[spans[0][0]:spans[0][1]] == "KRT-7" and spans[0][2] > 0.5
    assert sum(p for _, _, p in spans) == pytest.approx(1.0)
    cut = span_inputs("q", context, context.index("KRT-7"), "KRT-7", tok, 8)  # the answer is cut off
    assert cut["label"].tolist() == [0, 0]


def test_task_pools_snippets_of_one_question():
    task = BioASQ()
    ex = task.read(task.default_data, "dev")
    assert len({e["qid"] for e in ex}) == 16 and len(ex) > 16 and all(len(e["qid"]) == 24 for e in ex)
    assert all(e["gold"] for e in ex)  # from dev_golden.json
    tok = load_tokenizer(TOKENIZER)
    preds = []
    for i, e in enumerate(ex):  # every snippet answers right, except odd snippets put a wrong answer first
        f = task.inputs(e, tok, 64)
        s, t = f["label"].tolist()
        logits = np.zeros((64, 2))
        logits[s, 0] = logits[t, 1] = 5.0
        if i % 2:
            logits[1 + int(np.argmax(f["char_start"] >= 0)), :] = 8.0
        preds.append(task.decode(logits, f))
    got = task.metrics(preds, ex)
    assert got["lenient_accuracy"] == 1.0 and got["questions"] == 16
    assert 0 < got["strict_accuracy"] <= got["mrr"] <= 1.0
