"""Synthetic QA: answer candidates, question cleaning, the roundtrip rule with a stub QA model, SQuAD output
that ``datasets`` loads, stage counts of the pipeline, the question-generation task's reader, and the
open-domain reader loop."""
import json

import pytest

from mwb.core.config import ConfigError
from mwb.retrieval.salient_spans import salient_spans
from mwb.tasks.squad.data import read_squad
from mwb.tasks.synthetic_qa import pipeline
from mwb.tasks.synthetic_qa.answers import answer_candidates, sentence_of
from mwb.tasks.synthetic_qa.questions import DEMOS, clean_question, qg_prompt
from mwb.tasks.synthetic_qa.roundtrip import FilterRule, roundtrip_filter
from mwb.tasks.synthetic_qa.squad_format import to_squad, write_squad
from tests.helpers.checkpoints import tiny_checkpoint

PASSAGES = ["The bridge over the Nile was opened in 1902 by Lord Cromer. It carried trains until 1960.",
            "Ada Lovelace wrote notes on the Analytical Engine of Charles Babbage in 1843.",
            "nothing salient here at all."]


def test_answer_candidates_are_salient_spans_at_their_offsets():
    cands = answer_candidates(PASSAGES, per_passage=2, seed=0)
    assert cands == answer_candidates(PASSAGES, per_passage=2, seed=0)  # seeded
    assert {c.passage for c in cands} == {0, 1} and sum(c.passage == 0 for c in cands) == 2
    spans = {(s.start, s.text) for p in PASSAGES[:2] for s in salient_spans(p)}
    for c in cands:
        assert PASSAGES[c.passage][c.start:c.start + len(c.text)] == c.text and (c.start, c.text) in spans
        assert c.text in c.sentence and c.sentence in PASSAGES[c.passage]
    assert sentence_of(PASSAGES[0], PASSAGES[0].index("1960"), PASSAGES[0].index("1960") + 4) == \
        "It carried trains until 1960."


def test_question_prompt_and_cleaning():
    p = qg_prompt("Ada wrote notes.", "Ada", shots=1)
    c, a, q = DEMOS[0]
    assert p == f"Context: {c}\nAnswer: {a}\nQuestion: {q}\n\nContext: Ada wrote notes.\nAnswer: Ada\nQuestion:"
    assert clean_question(" Who wrote the notes? Ada did.\nContext: x") == "Who wrote the notes?"
    assert clean_question(" Who?") is None and clean_question("Ada wrote notes") is None


EXAMPLES = [{"id": str(i), "question": f"q{i}", "context": "c", "answers": [a]}
            for i, a in enumerate(["Lord Cromer", "1902", "the Analytical Engine", "Charles Babbage"])]


def test_roundtrip_keeps_exactly_the_recovered_pairs():
    recovered = {"0": "Lord Cromer", "1": "1903", "2": "Analytical Engine", "3": "Babbage wrote"}
    stub = lambda exs: [recovered[e["id"]] for e in exs]  # noqa: E731  (a QA model that answers from a table)
    kept, dropped = roundtrip_filter(EXAMPLES, stub, FilterRule("em", 1.0))
    assert [e["id"] for e in kept] == ["0", "2"]  # "the" is dropped by SQuAD normalisation
    assert [e["id"] for e in dropped] == ["1", "3"] and dropped[0]["recovered"] == "1903"
    kept, _ = roundtrip_filter(EXAMPLES, stub, FilterRule("f1", 0.5))
    assert [e["id"] for e in kept] == ["0", "2", "3"]  # F1("Babbage wrote", "Charles Babbage") = 0.5
    assert kept[2]["roundtrip_score"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="answered 1 of 4"):
        roundtrip_filter(EXAMPLES, lambda exs: ["x"], FilterRule())


def records():
    return [{"id": f"r{i}", "title": "Nile" if i < 2 else "Ada", "context": PASSAGES[0 if i < 2 else 1],
             "question": f"Question {i}?", "answer": a, "answer_start": PASSAGES[0 if i < 2 else 1].index(a)}
            for i, a in enumerate(["1902", "Lord Cromer", "Charles Babbage"])]


def test_squad_output_loads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    path = write_squad(str(tmp_path / "syn.json"), records())
    ds = datasets.load_dataset("json", data_files=path, field="data", split="train")
    assert ds["title"] == ["Nile", "Ada"]
    qas = [qa for art in ds for p in art["paragraphs"] for qa in p["qas"]]
    assert [q["answers"][0]["text"] for q in qas] == ["1902", "Lord Cromer", "Charles Babbage"]
    ex = read_squad(path)  # what mwb finetune squad reads
    assert [e["answers"] for e in ex] == [["1902"], ["Lord Cromer"], ["Charles Babbage"]]
    bad = dict(records()[0], answer_start=0)
    with pytest.raises(ValueError, match="not at 0"):
        to_squad([bad])


def test_pipeline_logs_and_writes_stage_counts(tmp_path, monkeypatch):
    evidence = tmp_path / "ev.tsv"
    evidence.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{p}\tT{i}\n" for i, p in enumerate(PASSAGES)))
    gen = iter(["Who opened it?", "no question here", "When did it close? yes", "Who wrote the notes?"])
    monkeypatch.setattr(pipeline, "load_language_model", lambda name: (None, None))
    monkeypatch.setattr(pipeline, "generate_questions",
                        lambda lm, contexts, answers, *a: [next(gen) for _ in answers])
    recovered = {}

    def answerer(path, seq):
        def answer(exs):  # recovers the first pair's answer only
            recovered.update({e["id"]: e["answers"][0] if e["question"] == "Who opened it?" else "nope" for e in exs})
            return [recovered[e["id"]] for e in exs]
        return answer
    monkeypatch.setattr(pipeline, "squad_answerer", answerer)
    logs = []
    cfg = pipeline.SynthesisConfig(out=str(tmp_path / "out"), corpus=str(evidence), passages=0,
                                   answers_per_passage=2, filter_model="stub")
    report = pipeline.synthesize(cfg, say=logs.append)
    n_cands = len(answer_candidates(PASSAGES, 2, 1))
    assert report["counts"] == {"passages": 3, "answer_candidates": n_cands, "questions_generated": n_cands,
                                "questions_empty": 0, "questions_well_formed": 3, "roundtrip_kept": 1, "roundtrip_dropped": 2}
    assert any("stage 3 roundtrip" in m and "kept 1, dropped 2 of 3" in m for m in logs)
    out = tmp_path / "out"
    assert len(read_squad(str(out / "unfiltered.json"))) == 3
    kept = read_squad(str(out / "synthetic.json"))
    assert [e["question"] for e in kept] == ["Who opened it?"]
    assert json.loads((out / "stages.json").read_text())["counts"]["roundtrip_kept"] == 1
    assert (out / "stages.json").resolve() == (out / "stages" / "filter.json").resolve()  # one write: the marker
    assert len((out / "dropped.jsonl").read_text().splitlines()) == 2
    # the size-matched control: as many pairs as were kept, drawn from all well-formed pairs, seeded
    matched = read_squad(str(out / "unfiltered_matched.json"))
    assert len(matched) == 1 and matched[0]["id"] in {e["id"] for e in read_squad(str(out / "unfiltered.json"))}
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [e["id"] for e in matched] == [r["id"] for r in pipeline.matched_sample(recs, 1, cfg.seed)]


def test_matched_sample_is_seeded_in_file_order_and_never_larger_than_its_source():
    recs = [{"id": str(i)} for i in range(10)]
    a = pipeline.matched_sample(recs, 4, seed=3)
    assert a == pipeline.matched_sample(recs, 4, seed=3) and len(a) == 4
    assert [int(r["id"]) for r in a] == sorted(int(r["id"]) for r in a)
    assert any(pipeline.matched_sample(recs, 4, seed=s) != a for s in range(4, 8))
    assert pipeline.matched_sample(recs, 0, seed=3) == [] and pipeline.matched_sample(recs, 99, seed=3) == recs


def test_question_generation_task_reads_squad(tmp_path):
    from mwb.tasks.api.registry import get_task
    path = write_squad(str(tmp_path / "train.json"), records())
    task = get_task("question-generation")(context="sentence")
    ex = task.read(path, "train")
    assert ex[0] == {"id": "r0", "context": "The bridge over the Nile was opened in 1902 by Lord Cromer.", "answer": "1902",
                     "question": "Question 0?"}
    x = task.inputs(ex[0], None, 0)
    assert x["prompt"] == qg_prompt(ex[0]["context"], "1902", shots=0) and x["target"] == " Question 0?"


def test_open_domain_reader_loop(tmp_path):
    from mwb.tasks.synthetic_qa.open_domain import open_domain_eval
    bert = tiny_checkpoint(str(tmp_path / "bert"), "bert-tiny", num_layers=1, hidden_size=32,
                           num_attention_heads=2, ffn_hidden_size=64)
    evidence = tmp_path / "ev.tsv"
    evidence.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{p}\tT{i}\n" for i, p in enumerate(PASSAGES)))
    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"question": "Who opened the bridge over the Nile?", "answers": ["Lord Cromer"]}) + "\n"
                  + json.dumps({"question": "Who wrote notes on the Analytical Engine?", "answers": ["Ada"]}) + "\n"
                  + json.dumps({"question": "What is salient?", "answers": ["zebra"]}) + "\n")
    metrics, per_q = open_domain_eval("untrained", str(qs), str(evidence), top_k=1, seq_length=64, base=bert)
    assert metrics["num_questions"] == 3 and metrics["retrieval_top1"] == pytest.approx(200 / 3)
    assert [p["retrieved"] for p in per_q] == [True, True, False]
    for p in per_q:  # an untrained reader still answers with a span of a retrieved passage
        assert p["prediction"] and any(p["prediction"] in x for x in PASSAGES)
    from mwb.evaluation.metrics import squad_exact_match, squad_f1, squad_scores
    assert metrics["exact_match"] == squad_scores([p["prediction"] for p in per_q],
                                                  [p["answers"] for p in per_q])["exact_match"]
    # per-question records pair two readers by id (the line in the file) and average to the corpus numbers
    assert [p["id"] for p in per_q] == ["q0", "q1", "q2"]
    for p in per_q:
        assert p["exact_match"] == 100.0 * squad_exact_match(p["prediction"], p["answers"])
        assert p["f1"] == pytest.approx(100.0 * squad_f1(p["prediction"], p["answers"]))
    assert metrics["f1"] == pytest.approx(sum(p["f1"] for p in per_q) / 3)
    _, sampled = open_domain_eval("untrained", str(qs), str(evidence), top_k=1, seq_length=64, base=bert, sample=2,
                                  seed=0)
    assert len(sampled) == 2 and {p["id"] for p in sampled} < {"q0", "q1", "q2"}  # a sample keeps the file's ids
    again = open_domain_eval("untrained", str(qs), str(evidence), top_k=1, seq_length=64, base=bert)[1]
    other = [open_domain_eval("untrained", str(qs), str(evidence), top_k=1, seq_length=64, base=bert,
                              init_seed=s)[1] for s in (1, 2, 3)]
    assert again == per_q and any(o != per_q for o in other)  # init_seed draws another fresh span head


def test_question_selection_titled_and_sampled():
    from mwb.core.errors import DataError
    from mwb.tasks.synthetic_qa.open_domain import select_questions
    qs = [{"question": f"q{i}", "answers": ["a"], "names_title": i % 3 == 0} for i in range(12)]
    assert [q["question"] for q in select_questions(qs, titled=True)] == ["q0", "q3", "q6", "q9"]
    picked = select_questions(qs, sample=5, seed=2)
    assert picked == select_questions(qs, sample=5, seed=2) and len(picked) == 5
    assert [int(q["question"][1:]) for q in picked] == sorted(int(q["question"][1:]) for q in picked)
    with pytest.raises(DataError, match="names_title"):
        select_questions([{"question": "q", "answers": ["a"]}], titled=True)


def test_bad_input_is_one_line(tmp_path, capsys):
    from tests.helpers.cli import run_cli
    code, _, err = run_cli(["qa", "evaluate-reader", "--questions", str(tmp_path / "nope.jsonl")], capsys)
    assert code == 1 and "nope.jsonl" in err and len(err.strip().splitlines()) == 2  # the banner + the error
    code, _, err = run_cli(["qa", "synthesize", "--corpus", str(tmp_path / "nope.tsv"), "--out", str(tmp_path / "o")],
                           capsys)
    assert code == 1 and err.strip().splitlines()[-1].startswith("mwb: error: file not found")


def test_a_rerun_with_the_same_out_skips_the_finished_stages(tmp_path, monkeypatch):
    """Questions generated once are reused (the generator is not loaded again); a filter stage cut short (no
    marker) runs again and writes the same files; other settings on the same OUT are refused."""
    import dataclasses
    evidence = tmp_path / "ev.tsv"
    evidence.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{p}\tT{i}\n" for i, p in enumerate(PASSAGES)))
    gen = iter(["Who opened it?", "no question here", "When did it close? yes", "Who wrote the notes?"])
    loads = []
    monkeypatch.setattr(pipeline, "load_language_model", lambda name: loads.append(name) or (None, None))
    monkeypatch.setattr(pipeline, "generate_questions", lambda lm, contexts, answers, *a: [next(gen) for _ in answers])
    filters = []

    def answerer(path, seq):
        filters.append(path)
        return lambda exs: [e["answers"][0] if e["question"] == "Who opened it?" else "nope" for e in exs]
    monkeypatch.setattr(pipeline, "squad_answerer", answerer)
    out = tmp_path / "out"
    cfg = pipeline.SynthesisConfig(out=str(out), corpus=str(evidence), passages=0, answers_per_passage=2,
                                   filter_model="stub")
    first = pipeline.synthesize(cfg, say=lambda m: None)
    files = {n: (out / n).read_text() for n in ("unfiltered.json", "synthetic.json", "dropped.jsonl")}
    assert pipeline.synthesize(cfg, say=lambda m: None) == first and len(filters) == 1  # every stage skipped
    (out / "stages" / "filter.json").unlink()  # the filter cut short: its marker was never written
    (out / "synthetic.json").write_text("{truncated")
    second = pipeline.synthesize(cfg, say=lambda m: None)
    assert loads == [cfg.generator] and len(filters) == 2  # the generator loaded once, by the first run
    assert second["counts"] == first["counts"]
    assert {n: (out / n).read_text() for n in files} == files
    with pytest.raises(ConfigError, match="other settings"):
        pipeline.synthesize(dataclasses.replace(cfg, answers_per_passage=1), say=lambda m: None)
