"""The default roundtrip filter of ``mwb qa synthesize`` (no ``filter_model``) with real models: two tiny BERT
readers fine-tuned a few steps by ``mwb finetune squad`` child processes, each on one fold of the passages.
The question generator is stubbed (the filter, not the generator, is under test); every decision the filter
writes is checked against what the reader of the *other* fold predicts when loaded here on its own."""
import json
import os

import pytest

from mwb.evaluation.metrics import squad_f1
from mwb.tasks.squad.data import read_squad
from mwb.tasks.synthetic_qa import pipeline
from mwb.tasks.synthetic_qa.roundtrip import squad_answerer
from tests.tasks.encoder_helpers import tiny_bert_checkpoint

PASSAGES = ["The bridge over the Nile was opened in 1902 by Lord Cromer. It carried trains until 1960.",
            "Ada Lovelace wrote notes on the Analytical Engine of Charles Babbage in 1843.",
            "The Eiffel Tower in Paris was finished in 1889 by Gustave Eiffel for the World Fair.",
            "Marie Curie won the Nobel Prize in Physics in 1903 with Pierre Curie in Stockholm."]
SEQ = 48
EPOCHS = 30  # one step each (4 pairs per fold): enough for the two readers to answer differently


@pytest.mark.multiprocess  # two `mwb finetune squad` child processes
def test_cross_fitted_filter_decisions_follow_the_other_folds_reader(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    base = tiny_bert_checkpoint(str(tmp_path / "bert"), layers=1, hidden=32, seq=SEQ)
    evidence = tmp_path / "ev.tsv"
    evidence.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{p}\tT{i}\n" for i, p in enumerate(PASSAGES)))
    monkeypatch.setattr(pipeline, "load_language_model", lambda name: (None, None))
    monkeypatch.setattr(pipeline, "generate_questions",
                        lambda lm, contexts, answers, *a: [f"Which name or year is in: {c[:30]}?" for c in contexts])
    out = tmp_path / "out"
    cfg = pipeline.SynthesisConfig(out=str(out), corpus=str(evidence), passages=0, answers_per_passage=2,
                                   filter_base=base, filter_epochs=EPOCHS, seq_length=SEQ)
    report = pipeline.synthesize(cfg, say=lambda m: None)

    unfiltered = {e["id"]: e for e in read_squad(str(out / "unfiltered.json"))}
    folds = {k: {e["id"] for e in read_squad(str(out / "filter" / f"fold{k}.json"))} for k in (0, 1)}
    assert folds[0] and folds[1] and not folds[0] & folds[1]  # cross-fitted: each pair in one training fold
    assert folds[0] | folds[1] == set(unfiltered)
    # reader-foldK was trained on foldK.json; it judges the pairs it did not see
    everything = list(unfiltered.values())
    by_reader = {k: dict(zip(unfiltered, squad_answerer(str(out / "filter" / f"reader-fold{k}"), SEQ)(everything)))
                 for k in (0, 1)}
    recovered = {i: by_reader[0 if i not in folds[0] else 1][i] for i in unfiltered}
    # the readers disagree on some pair, so a filter that asked the reader which saw the pair would differ here
    assert any(by_reader[0][i] != by_reader[1][i] for i in unfiltered), by_reader
    want_kept = {i for i, e in unfiltered.items() if squad_f1(recovered[i], e["answers"]) >= 0.5}
    kept = {e["id"] for e in read_squad(str(out / "synthetic.json"))}
    dropped = [json.loads(line) for line in open(out / "dropped.jsonl")]
    assert kept == want_kept and {d["id"] for d in dropped} == set(unfiltered) - want_kept
    for d in dropped:
        assert d["recovered"] == recovered[d["id"]]
        assert d["roundtrip_score"] == pytest.approx(squad_f1(recovered[d["id"]], d["answers"]))
    assert (report["counts"]["roundtrip_kept"], report["counts"]["roundtrip_dropped"]) == \
        (len(want_kept), len(unfiltered) - len(want_kept))
    assert all(os.path.isfile(out / "filter" / f"reader-fold{k}" / "results.json") for k in (0, 1))
