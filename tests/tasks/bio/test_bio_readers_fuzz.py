"""The BioBERT-layout readers, fuzzed: NER ``token<TAB>label`` files, ChemProt's BLUE TSV and BioASQ's golden
file. Generated files read back exactly; one mutation (the label column dropped, a label outside the set, an
invalid UTF-8 byte, an empty file, truncated JSON, an answer of the wrong type) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.bio.bioasq_metrics import read_golden
from mwb.tasks.bio.chemprot import LABELS, read_blue_tsv
from mwb.tasks.bio.ner import read_conll
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, truncated, word, write

tag = st.sampled_from(["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease", "B", "I"])
sentences = st.lists(st.lists(st.tuples(word, tag), min_size=1, max_size=6), min_size=1, max_size=4)
relations = st.lists(st.tuples(st.lists(word, min_size=1, max_size=8).map(" ".join), st.sampled_from(LABELS)),
                     min_size=1, max_size=5)


def conll(sents) -> str:
    return "\n".join("".join(f"{w}\t{t}\n" for w, t in s) for s in sents)


def blue(rows) -> str:
    return "index\tsentence\tlabel\n" + "".join(f"{i}\t{s}\t{y}\n" for i, (s, y) in enumerate(rows))


@FUZZ
@given(sentences, relations)
def test_valid_files_read_back_exactly(sents, rows):
    with folder() as d:
        got = read_conll(write(os.path.join(d, "train.tsv"), conll(sents)))
        assert [(s["words"], s["tags"]) for s in got] == [([w for w, _ in s], [t for _, t in s]) for s in sents]
        got = read_blue_tsv(write(os.path.join(d, "dev.tsv"), blue(rows)))
        assert got == [{"id": str(i), "sentence": s, "label": LABELS.index(y)} for i, (s, y) in enumerate(rows)]


@FUZZ
@given(sentences, st.sampled_from(["no_label", "empty_label", "bad_label", "encoding", "empty"]), st.floats(0, 1))
def test_ner_mutation_is_one_data_error(sents, mutation, at):
    text = conll(sents)
    lines = text.split("\n")
    i = next(k for k in range(int(at * (len(lines) - 1)), -1, -1) if lines[k])
    word_ = lines[i].split("\t")[0]
    lines[i] = {"no_label": word_, "empty_label": word_ + "\t", "bad_label": word_ + "\tX-Chemical"}.get(mutation,
                                                                                                        lines[i])
    text = "\n".join(lines)
    data = bad_utf8(text, at) if mutation == "encoding" else "\n\n" if mutation == "empty" else text
    with folder() as d:
        assert "train.tsv" in fails(read_conll, write(os.path.join(d, "train.tsv"), data))


@FUZZ
@given(relations, st.sampled_from(["no_label", "bad_label", "encoding", "no_rows", "empty"]), st.floats(0, 1))
def test_chemprot_mutation_is_one_data_error(rows, mutation, at):
    i = int(at * (len(rows) - 1))
    if mutation == "bad_label":
        rows[i] = (rows[i][0], "CPR:7")
    text = blue(rows)
    if mutation == "no_label":
        text = "".join(line.rsplit("\t", 1)[0] + "\n" for line in text.splitlines())
    data = {"encoding": bad_utf8(text, at), "no_rows": "index\tsentence\tlabel\n", "empty": ""}.get(mutation, text)
    with folder() as d:
        assert "dev.tsv" in fails(read_blue_tsv, write(os.path.join(d, "dev.tsv"), data))


golden = st.lists(st.tuples(st.text("0123456789abcdef", min_size=24, max_size=24),
                            st.lists(st.lists(word, min_size=1, max_size=3), min_size=1, max_size=3)),
                  min_size=1, max_size=4, unique_by=lambda q: q[0])


@FUZZ
@given(golden)
def test_golden_reads_back_exactly(qs):
    with folder() as d:
        path = write(os.path.join(d, "g.json"), json.dumps({"questions": [{"id": i, "exact_answer": a} for i, a in qs]}))
        assert read_golden(path) == {i: [s for syn in a for s in syn] for i, a in qs}


@FUZZ
@given(golden, st.sampled_from(["answer_int", "answer_empty", "no_id", "truncated", "encoding"]), st.floats(0, 1))
def test_golden_mutation_is_one_data_error(qs, mutation, at):
    doc = {"questions": [{"id": i, "exact_answer": a} for i, a in qs]}
    q = doc["questions"][int(at * (len(qs) - 1))]
    if mutation == "answer_int":
        q["exact_answer"] = [[3]]
    elif mutation == "answer_empty":
        q["exact_answer"] = []
    elif mutation == "no_id":
        del q["id"]
    text = json.dumps(doc)
    data = truncated(text, at) if mutation == "truncated" else bad_utf8(text, at) if mutation == "encoding" else text
    with folder() as d:
        assert "g.json" in fails(read_golden, write(os.path.join(d, "g.json"), data))
