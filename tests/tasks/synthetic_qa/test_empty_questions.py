"""Synthetic questions follow the empty-output rule: a generator that emits the end token first writes no
question; stage 2 counts it as empty (in ``stages.json``'s counts) and never keeps it as a training pair."""
import pytest

from mwb.retrieval.inputs import Evidence
from mwb.tasks.synthetic_qa import pipeline
from mwb.tasks.synthetic_qa.answers import answer_candidates
from tests.helpers.biased_lm import EOD, lm

PASSAGES = ["The bridge over the Nile was opened in 1902 by Lord Cromer. It carried trains until 1960.",
            "Ada Lovelace wrote notes on the Analytical Engine of Charles Babbage in 1843."]


def stage_two(bias):
    evidence = Evidence("ev.tsv", ids=["0", "1"], texts=PASSAGES, titles=["Nile", "Ada"])
    cfg = pipeline.SynthesisConfig(out="unused", passages=0, answers_per_passage=2, qg_shots=0, batch_size=2)
    logs = []
    records, counts = pipeline.make_records(evidence, [0, 1], cfg, lm(bias), logs.append)
    return records, counts, logs


@pytest.mark.parametrize("biased", [True, False])
def test_empty_generated_questions_are_counted_and_never_kept(biased):
    records, counts, logs = stage_two({EOD: 50.0} if biased else None)
    n = len(answer_candidates(PASSAGES, 2, 1))
    assert n > 0 and counts["questions_generated"] == n
    # biased: every generation is "" (end token first); unbiased: word tokens, never empty, never a "?"
    assert counts["questions_empty"] == (n if biased else 0)
    assert records == [] and counts["questions_well_formed"] == 0
    assert any(f"{n if biased else 0} empty" in m for m in logs if "stage 2" in m)
