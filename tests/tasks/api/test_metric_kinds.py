"""Records first (issue 43): a task's results.json numbers, aggregated from its records by the declared
kinds, equal the reference libraries' computation on the same predictions (seqeval, scikit-learn, scipy,
rouge-score, the SQuAD 2.0 script's rules)."""
import random

import pytest

from mwb.tasks.bio.chemprot import LABELS, RELATIONS, ChemProt
from mwb.tasks.bio.ner import NER
from mwb.tasks.glue.task import Glue
from mwb.tasks.race.task import Race
from mwb.tasks.squad.task import Squad
from mwb.tasks.text.summarize import Summarize, lead_sentence

TAGS = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]


def test_ner_task_metrics_equal_seqeval():
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2
    rng = random.Random(3)
    task = NER()
    task.labels = TAGS  # what prepare() reads from the data
    examples, preds = [], []
    for n in range(30):
        length = rng.randint(1, 9)
        examples.append({"id": f"s#{n}", "words": ["w"] * length, "tags": [rng.choice(TAGS) for _ in range(length)]})
        preds.append([rng.randrange(len(TAGS)) for _ in range(length)])
    m = task.metrics(preds, examples)
    gold, pred = [e["tags"] for e in examples], [[TAGS[i] for i in p] for p in preds]
    assert m["precision"] == pytest.approx(seqeval.precision_score(gold, pred, zero_division=0), abs=1e-12)
    assert m["recall"] == pytest.approx(seqeval.recall_score(gold, pred, zero_division=0), abs=1e-12)
    assert m["f1"] == pytest.approx(seqeval.f1_score(gold, pred, zero_division=0), abs=1e-12)
    assert m["f1_strict"] == pytest.approx(seqeval.f1_score(gold, pred, mode="strict", scheme=IOB2, zero_division=0),
                                           abs=1e-12)
    assert m["sentences"] == 30 and 0 < m["f1"] < 1


def test_chemprot_task_metrics_equal_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(5)
    golds = [rng.randrange(len(LABELS)) for _ in range(60)]
    preds = [g if rng.random() < 0.5 else rng.randrange(len(LABELS)) for g in golds]
    m = ChemProt().metrics(preds, [{"index": str(i), "label": g} for i, g in enumerate(golds)])
    p, r, f, _ = metrics.precision_recall_fscore_support([LABELS[g] for g in golds], [LABELS[q] for q in preds],
                                                         labels=list(RELATIONS), average="micro", zero_division=0)
    assert (m["precision"], m["recall"], m["f1"]) == pytest.approx((p, r, f), abs=1e-12)
    assert m["accuracy"] == pytest.approx(metrics.accuracy_score(golds, preds), abs=1e-12) and m["count"] == 60
    assert m["gold"] == sum(1 for g in golds if g > 0) and m["predicted"] == sum(1 for q in preds if q > 0)


def test_stsb_correlations_equal_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    golds = [rng.uniform(0, 5) for _ in range(25)]
    preds = [g + rng.gauss(0, 1.5) for g in golds]
    m = Glue(task="stsb").metrics(preds, [{"index": str(i), "label": g} for i, g in enumerate(golds)])
    assert m["pearson"] == pytest.approx(stats.pearsonr(preds, golds)[0], abs=1e-12)
    assert m["spearman"] == pytest.approx(stats.spearmanr(preds, golds)[0], abs=1e-12)
    assert list(m) == ["pearson", "spearman", "count"] and m["count"] == 25


def test_summarize_rouge_equals_rouge_score():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    examples = [{"source": "Rain fell on the town. It was cold all day.", "summary": "Rain fell, the town was cold"},
                {"source": "The cats ran home. Dogs followed them.", "summary": "cats running home"},
                {"source": "Markets rose sharply today.", "summary": "stocks fell"}]
    preds = ["rain fell on the cold town", "the cat runs home", "markets rose"]
    m = Summarize().metrics(preds, examples)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for prefix, texts in (("", preds), ("lead_", [lead_sentence(e["source"]) for e in examples])):
        for key in ("rouge1", "rouge2", "rougeL"):
            want = sum(100 * scorer.score(e["summary"], t)[key].fmeasure for t, e in zip(texts, examples)) / 3
            assert m[prefix + key] == pytest.approx(want, abs=1e-9), prefix + key
    assert m["count"] == 3 and m["rouge1"] > 0


def test_race_levels_equal_sklearn_on_each_subset():
    metrics = pytest.importorskip("sklearn.metrics")
    levels = ["middle", "high", "high", "middle", "high", "high"]
    golds, preds = [0, 1, 2, 3, 0, 1], [0, 1, 0, 0, 0, 2]
    examples = [{"id": str(i), "label": g, "level": lv} for i, (g, lv) in enumerate(zip(golds, levels))]
    m = Race().metrics(preds, examples)
    for level in ("middle", "high"):
        keep = [i for i, lv in enumerate(levels) if lv == level]
        assert m[f"accuracy_{level}"] == metrics.accuracy_score([golds[i] for i in keep], [preds[i] for i in keep])
        assert m[f"count_{level}"] == len(keep)
    assert m["accuracy"] == metrics.accuracy_score(golds, preds) and m["count_all"] == 6


def test_squad_v2_task_metrics_equal_the_official_rules():
    from mwb.evaluation.squad_metrics import best_null_threshold, squad_v2_scores
    rng = random.Random(11)
    answers = [["the red fox"], ["1564", "in 1564"], [], ["a house"], [], ["William Shakespeare"]]
    spans = ["red fox", "1564", "a hat", "house", "the town", "Shakespeare wrote"]
    margins = [rng.uniform(-3, 3) for _ in answers]
    preds = [{"text": s if mg <= 0 else "", "span_text": s, "null_margin": mg} for s, mg in zip(spans, margins)]
    m = Squad(version="2.0").metrics(preds, [{"id": f"q{i}", "answers": a} for i, a in enumerate(answers)])
    want = {**squad_v2_scores([p["text"] for p in preds], answers), **best_null_threshold(spans, margins, answers),
            "count": 6}
    assert m.keys() == want.keys()
    assert all(m[k] == pytest.approx(want[k], abs=1e-9) for k in want)
