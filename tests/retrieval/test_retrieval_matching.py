"""DPR answer matching (hand-made cases, incl. its normalisation quirks), top-k accuracy, and the readers of
DPR's evidence/question formats; the bundled questions are all answerable from the bundled passages."""
import gzip
import json

import pytest

from mwb.retrieval.matching import first_hit, has_answer, parse_ks, simple_tokens, top_k_accuracy
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, BUNDLED_QUESTIONS, BUNDLED_REAL_QUESTIONS, read_evidence, read_questions
from tests.helpers.needs import needs


@pytest.mark.parametrize("answers,text,want", [
    (["Paris"], "The capital of France is Paris.", True),
    (["paris"], "PARIS is large", True),                          # uncased
    (["cat"], "Two cats sat.", False),                            # whole tokens only
    (["New York"], "He moved to New  York City", True),           # whitespace-insensitive
    (["New York"], "New-York", False),                            # '-' is a token of its own
    (["U.S."], "the U.S. Army", True),                            # punctuation tokens must match too
    (["U.S."], "the US Army", False),
    (["hello world"], "hello, world", False),                     # ',' breaks the contiguous match
    (["Cafe"], "Café society", False),                            # NFD keeps accents: no folding
    (["Café"], "CAFÉ society", True),
    (["Curaçao"], "Bonaire and Curac\u0327ao", True),            # composed vs decomposed: same after NFD
    (["1,000"], "about 1,000 people", True),
    (["1000"], "about 1,000 people", False),
    ([""], "anything at all", True),                              # DPR: an empty answer matches everything
    ([], "anything", False),
    (["x", "Paris"], "Paris", True),                              # any answer
    (["don't"], "I don't know", True),                            # ' is a separate token on both sides
])
def test_string_matching(answers, text, want):
    assert has_answer(answers, text, "string") is want


def test_regex_matching():
    assert has_answer([r"\d{4} BC"], "born 384 BC", "regex") is False
    assert has_answer([r"3\d\d BC"], "born 384 bc", "regex") is True        # case-insensitive search
    assert has_answer(["cat"], "two cats", "regex") is True                 # substring, unlike string mode
    assert has_answer(["(unclosed"], "(unclosed", "regex") is False          # invalid pattern never matches
    with pytest.raises(ValueError):
        has_answer(["a"], "a", "fuzzy")


def test_tokenizer_with_and_without_regex_package():
    text = "Café — the U.S.'s 2nd-largest (est. 1,000) naïve_city\tok"
    import unicodedata
    nfd = unicodedata.normalize("NFD", text)
    assert simple_tokens(nfd, use_regex=False) == simple_tokens(nfd)
    assert simple_tokens("U.S. army") == ["u", ".", "s", ".", "army"]


def test_first_hit_and_topk():
    ps = ["nothing here", "still nothing", "the answer is Luanda", "Luanda again"]
    assert first_hit(["Luanda"], ps) == 2 and first_hit(["Oslo"], ps) is None
    acc = top_k_accuracy([0, 2, None, 4, 1], [1, 3, 5])
    assert acc == {1: 0.2, 3: 0.6, 5: 0.8}
    assert parse_ks("20, 1,5,1") == [1, 5, 20]
    with pytest.raises(ValueError):
        parse_ks("1,x")


def test_readers(tmp_path):
    ev = tmp_path / "ev.tsv.gz"
    with gzip.open(ev, "wt") as f:
        f.write('id\ttext\ttitle\n1\t"a ""quoted"" text\twith tab"\tT1\n2\tplain\tT2\n')
    e = read_evidence(str(ev))
    assert e.ids == ["1", "2"] and e.texts[0] == 'a "quoted" text\twith tab' and e.titles == ["T1", "T2"]
    tsv = tmp_path / "q.qa.csv"  # DPR's NQ-open files: tab-separated despite the name, python-style lists
    tsv.write_text("who wrote it?\t['Swift', \"Jonathan Swift\"]\nwhere?\t[\"Paris\"]\n")
    assert read_questions(str(tsv)) == [{"question": "who wrote it?", "answers": ["Swift", "Jonathan Swift"]},
                                        {"question": "where?", "answers": ["Paris"]}]
    csvf = tmp_path / "q.csv"
    csvf.write_text('question,answers\n"a, b?","[""x""]"\n')
    assert read_questions(str(csvf)) == [{"question": "a, b?", "answers": ["x"]}]
    jl = tmp_path / "q.jsonl"
    jl.write_text(json.dumps({"question": "q1", "answer": ["a1"]}) + "\n" + json.dumps({"question": "q2", "answers": "a2"}) + "\n")
    assert read_questions(str(jl)) == [{"question": "q1", "answers": ["a1"]}, {"question": "q2", "answers": ["a2"]}]


def test_bundled_questions_are_answerable():
    ev = read_evidence(BUNDLED_EVIDENCE)
    qs = read_questions(BUNDLED_QUESTIONS)
    assert len(ev) > 900 and len(qs) >= 40
    from mwb.retrieval.matching import normalize
    tokens = [simple_tokens(normalize(t)) for t in ev.texts]
    for q in qs:
        hits = sum(has_answer(q["answers"], t, text_tokens=tk) for t, tk in zip(ev.texts, tokens))
        assert 1 <= hits <= 40, q


def test_real_questions_match_the_evidence_as_recorded():
    """The bundled real DPR questions: each sampled record's answer occurs in exactly as many passages as
    the builder recorded (DPR's has-answer rule; regexes for CuratedTREC)."""
    import gzip
    import random

    from mwb.retrieval.matching import normalize
    ev = read_evidence(BUNDLED_EVIDENCE)
    recs = [json.loads(line) for line in gzip.open(BUNDLED_REAL_QUESTIONS, "rt", encoding="utf-8")]
    assert len(recs) > 10000 and {r["dataset"] for r in recs} == {"nq", "trivia", "wq", "curated", "squad"}
    tokens = [simple_tokens(normalize(t)) for t in ev.texts]
    for r in random.Random(0).sample(recs, 25):
        mode = "regex" if r["dataset"] == "curated" else "string"
        hits = sum(has_answer(r["answers"], t, mode, tk if mode == "string" else None) for t, tk in zip(ev.texts, tokens))
        assert hits == r["passages_with_answer"] >= 1, r


@pytest.mark.parametrize("mode", ["string", "regex"])
def test_corpus_matcher_equals_first_hit_on_every_hand_case(mode):
    """The cached matcher (inverted index, answers once) gives first_hit's ranks: the hand cases above as a
    corpus, each case's answers over rows in a scrambled order (negative rows, faiss's "none", skipped)."""
    from mwb.retrieval.matching import CorpusMatcher
    cases = test_string_matching.pytestmark[0].args[1]
    texts = [c[1] for c in cases] + ["Paris Paris", "New York New York", "cat. cats"]
    cases = cases + [([r"3\d\d BC", "(unclosed"], "", None), (["York New"], "", None)]
    m = CorpusMatcher(texts, mode)
    import random
    rng = random.Random(0)
    answers, rows = [], []
    for answers_i, _, _ in cases:
        order = list(range(len(texts)))
        rng.shuffle(order)
        answers.append(list(answers_i))
        rows.append(order[:7] + [-1])
    want = [first_hit(a, [texts[r] for r in row if r >= 0], mode) for a, row in zip(answers, rows)]
    assert m.first_hits(answers, rows) == want
    assert m.first_hits(answers, rows) == want  # from the caches
    if mode == "string":
        assert sorted(m.rows_with("Paris")) == [i for i, t in enumerate(texts) if has_answer(["Paris"], t)]


@needs("bm25s")
def test_qa_eval_first_hits_equal_the_old_per_question_path_on_bundled_questions():
    """BM25 top-100 of 300 real questions over the bundled evidence: the matcher the eval uses gives the
    per-question first_hit's ranks (a brute-force reference: every passage re-tokenised)."""
    from mwb.retrieval.bm25 import BM25Retriever
    from mwb.retrieval.matching import CorpusMatcher
    ev = read_evidence(BUNDLED_EVIDENCE)
    qs = read_questions(BUNDLED_REAL_QUESTIONS)[::47][:300]
    _, rows = BM25Retriever(ev).search([q["question"] for q in qs], 100)
    want = [first_hit(q["answers"], [ev.texts[r] for r in row]) for q, row in zip(qs, rows)]
    got = CorpusMatcher(ev.texts).first_hits([q["answers"] for q in qs], rows)
    assert got == want and sum(h is not None for h in want) > 100  # enough hits that a wrong rank shows
