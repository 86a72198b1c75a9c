"""``mwb repro biomegatron``: the smoke run writes every file; each per-seed F1 is the one its predictions give;
the comparisons are the paired statistics of those predictions; the vocabulary statistics are the report's
on the cell's own vocabulary; commands.sh reruns as it stands. Plus the pieces the experiment added: the
``--max-words`` / ``--max-docs`` limits, canonical WordPiece ids, and the silver set's mention files."""
from __future__ import annotations

import gzip
import json
import os
import shlex

import pytest

from mwb.core.data import IndexedDataset
from mwb.core.data.readers import iter_texts
from mwb.core.tokenizers import load_tokenizer
from mwb.core.tokenizers.report import vocab_report, word_counts
from mwb.core.tokenizers.train import first_words, train_tokenizer
from mwb.evaluation import stats
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.repro.experiments.biomegatron import CONDITIONS, NER_METRICS, VOCAB_METRICS
from mwb.tasks.bio.ner import read_conll
from tests.core.data.test_medline import XML
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke

SEEDS = (0, 1)
needs_medline = needs(data=["medline"])  # PubMed text, the silver NER set: `mwb data fetch medline`


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run on one thread, and its CPU seconds (tests/helpers/repro_smoke.py)."""
    out = tmp_path_factory.mktemp("biomegatron") / "smoke"
    _, cpu = run_smoke("biomegatron", out, "--seeds", str(len(SEEDS)))
    return out, cpu


def _results(out):
    return json.loads((out / "results.json").read_text())


def _cell(out, condition, seed):
    return out / "cells" / condition / f"seed{seed}"


@needs_medline
def test_smoke_writes_every_file(smoke):
    out, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu  # 2 minutes of 2 cores
    for name in ("report.md", "results.json", "commands.sh", "env.json", "biomegatron.png"):
        assert (out / name).stat().st_size > 100, name
    for c in CONDITIONS:
        for s in SEEDS:
            assert (out / "predictions" / c / f"seed{s}.jsonl").stat().st_size > 100
    res = _results(out)
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "2010.06060"
    head = [r for r in res["comparisons"] if r["headline"]]
    assert [(r["a"], r["b"], r["metric"]) for r in head] == [("general-cased", "bio-cased", "f1")]
    assert res["verdict"] == head[0]["verdict"] == stats.verdict(head[0]["p"], head[0]["diff"], "greater")
    assert f"**Verdict: {res['verdict']}**" in (out / "report.md").read_text()


@needs_medline
def test_per_seed_values_are_those_of_the_predictions(smoke):
    out, res = smoke[0], _results(smoke[0])
    for c in CONDITIONS:
        for s in SEEDS:
            recs = read_predictions(str(out / "predictions" / c / f"seed{s}.jsonl"))
            test = read_conll(str(_cell(out, c, s) / "ner" / "test.tsv"))
            assert [r["id"] for r in recs] == [e["id"] for e in test]  # every test sentence, paired by id
            assert [r["gold"] for r in recs] == [e["tags"] for e in test]
            for m in NER_METRICS:
                assert res["conditions"][c][m][s] == pytest.approx(aggregate(recs, m)), (c, s, m)
            found = json.loads((_cell(out, c, s) / "results.json").read_text())["metrics"]
            assert sum(r["f1"]["tp"] + r["f1"]["fn"] for r in recs) == found["entities_gold"] > 0
            assert sum(r["f1"]["tp"] + r["f1"]["fp"] for r in recs) == found["entities_found"]


@needs_medline
def test_comparisons_are_the_paired_statistics_of_the_predictions(smoke):
    out, res = smoke[0], _results(smoke[0])
    for row in res["comparisons"]:
        a, b = res["conditions"][row["a"]]["f1"], res["conditions"][row["b"]]["f1"]
        assert row["mean_a"] == pytest.approx(sum(a) / len(a)) and row["mean_b"] == pytest.approx(sum(b) / len(b))
        assert row["diff"] == pytest.approx(row["mean_b"] - row["mean_a"])
        runs = [[read_predictions(str(out / "predictions" / c / f"seed{s}.jsonl")) for s in SEEDS]
                for c in (row["a"], row["b"])]
        again = stats.compare_runs(runs[0], runs[1], "f1")
        assert (row["p"], row["test"], row["paired_over"]) == (pytest.approx(again.p), "two-level", "items")
        assert row["n_items"] == len({x["id"] for r in runs[0] for x in r}) and row["n_seeds"] == len(SEEDS)


@needs_medline
def test_vocabulary_statistics_are_the_reports_on_the_cells_vocabulary(smoke):
    out, res = smoke[0], _results(smoke[0])
    from mwb.repro.experiments.biomegatron import _pubmed_file
    held_out = os.path.join(os.path.dirname(_pubmed_file()), "pubmed-29768149.xml")
    counts = word_counts(iter_texts([held_out]))
    for c in CONDITIONS:
        for m in VOCAB_METRICS:
            assert len(res["conditions"][c][m]) == 1, (c, m)  # measured in the first seed's cell only
        cell = _cell(out, c, 0)
        terms = (cell / "ner" / "train_mentions.txt").read_text().splitlines()
        tok = load_tokenizer(str(cell / "vocab"))
        row = vocab_report(tok, counts, terms)
        assert tok.vocab_size == 1000 and row["terms"] == len(terms) > 0
        for m in VOCAB_METRICS:
            assert res["conditions"][c][m] == [pytest.approx(row[m])], (c, m)
        assert row["term_pieces_per_word"] >= 1 and 0 <= row["terms_whole"] <= 1
        # the uncased vocabularies lower-case what they read; the cased ones keep "Aspirin" apart from "aspirin"
        assert (tok.encode("Aspirin") == tok.encode("aspirin")) == c.endswith("uncased")
        assert res["details"][c][0]["vocabulary"]["vocab_size"] == 1000


@needs_medline
def test_commands_sh_reruns_as_it_stands(smoke, capsys, tmp_path):
    out, res = smoke[0], _results(smoke[0])
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(CONDITIONS) * (7 + 6)  # the first seed also runs the vocabulary report
    evals = [a for a in lines if a[1:3] == ["eval", "ner"]]
    cell = str(_cell(out, "bio-uncased", 1))
    argv = next(a for a in evals if a[a.index("--out") + 1] == cell)
    argv[argv.index("--out") + 1] = str(tmp_path / "again")
    code, _, err = run_cli(argv[1:], capsys)
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "results.json").read_text())["metrics"]["f1"]
    assert again == pytest.approx(res["conditions"]["bio-uncased"]["f1"][1])
    trains = [a for a in lines if a[1:3] == ["tokenizer", "train"]]
    assert all(("--lowercase" in a) == ("uncased" in a[a.index("--out") + 1]) for a in trains)
    assert all(a[a.index("--max-words") + 1] == "10000" for a in trains)


@needs_medline
def test_a_rerun_reuses_every_finished_cell(smoke):
    from mwb.repro.registry import get_experiment
    from mwb.repro.runner import plan_run, run_experiment
    first = _results(smoke[0])
    res = run_experiment(plan_run(get_experiment("biomegatron"), "smoke", len(SEEDS), str(smoke[0])),
                         invoke=lambda argv: pytest.fail(f"ran {argv}"), progress=False)
    assert res["cells"]["ran"] == 0 and res["cells"]["reused"] == len(CONDITIONS) * len(SEEDS)
    assert res["conditions"] == first["conditions"] and res["comparisons"] == first["comparisons"]


def test_paper_scale_dry_run_uses_the_users_data_and_plans_the_paper_model(capsys):
    sets = ["--set", "pubmed_text=/d/pubmed.jsonl", "--set", "general_text=/d/wiki.jsonl", "--set",
            "ner_data=/d/BC5CDR-chem", "--set", "heldout_text=/d/held.xml.gz"]
    code, stdout, err = run_cli(["repro", "biomegatron", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    lines = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb ")]
    assert not any(a[1:3] == ["data", "silver-ner"] for a in lines)
    trains = [a for a in lines if a[1:3] == ["tokenizer", "train"]]
    assert len(trains) == 4 * 3 and all("--max-words" not in a and a[a.index("--vocab-size") + 1] == "30000"
                                        for a in trains)
    assert {a[-1] for a in trains} == {"/d/pubmed.jsonl", "/d/wiki.jsonl"}
    reports = [a for a in lines if a[1:3] == ["tokenizer", "report"]]
    assert len(reports) == 4 and all("--terms" not in a and "/d/held.xml.gz" in a for a in reports)
    ft = next(a for a in lines if a[1:3] == ["finetune", "ner"])
    assert ft[ft.index("--data") + 1] == "/d/BC5CDR-chem" and ft[ft.index("--epochs") + 1] == "30"
    pt = next(a for a in lines if a[1:3] == ["pretrain", "bert"])
    assert pt[pt.index("--preset") + 1] == "bert-large" and pt[pt.index("--seq-length") + 1] == "512"
    assert "mwb plan --preset bert-large" in stdout and "s/iteration" in stdout
    code, _, err = run_cli(["repro", "biomegatron", "--scale", "paper", "--dry-run"], capsys)
    assert code == 2 and "needs --set pubmed_text" in err


# ------------------------------------------------------------------------ what the experiment added


def test_first_words_cuts_at_the_limit():
    texts = ["a b  c", "d e", "f"]
    assert list(first_words(iter(texts), 4)) == ["a b  c", "d"]
    assert list(first_words(iter(texts), 5)) == ["a b  c", "d e"]
    assert list(first_words(iter(texts), 100)) == texts


def test_wordpiece_ids_are_specials_then_sorted_and_max_words_limits_the_text(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text("the quick brown fox jumps over the lazy dog\n" * 20 + "zebra xylophone\n" * 20)
    vocabs = []
    for name, limit in (("a", None), ("b", None), ("short", 180)):
        train_tokenizer("wordpiece", [str(src)], 300, str(tmp_path / name), max_words=limit)
        vocabs.append((tmp_path / name / "vocab.txt").read_text().splitlines())
    a, b, short = vocabs
    specials = ["<|endoftext|>", "[PAD]", "[MASK]", "[CLS]", "[SEP]", "[UNK]"]
    assert a[:6] == specials and a[6:] == sorted(a[6:])
    if set(a) == set(b):  # the trainer may break an equal-count tie differently; the ids then still agree
        assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert "zebra" in a and "zebra" not in short  # the first 180 words are the fox lines
    ids = load_tokenizer(str(tmp_path / "a")).encode("the zebra")
    assert ids == [a.index("the"), a.index("zebra")]


def test_preprocess_max_docs(tmp_path, capsys):
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"text": f"document number {i}."}) + "\n" for i in range(5)))
    tok = os.path.join(os.path.dirname(__file__), "..", "..", "mwb", "data", "corpus", "tokenizer.json")
    code, _, err = run_cli(["preprocess", "--input", str(src), "--output-prefix", str(tmp_path / "p"),
                            "--tokenizer", tok, "--max-docs", "2"], capsys)
    assert code == 0, err
    assert IndexedDataset(str(tmp_path / "p_text_document")).num_documents == 2


def test_silver_ner_writes_mentions_and_reuses_its_cache(tmp_path, capsys):
    medline = tmp_path / "sample.xml.gz"
    medline.write_bytes(gzip.compress(XML.encode()))
    argv = ["data", "silver-ner", "--medline", str(medline), "--sizes", "1,0,0"]
    code, stdout, err = run_cli(argv + ["--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert "train: 1 citations, 3 sentences, 3 mentions" in stdout
    # title "Cisplatin nephrotoxicity ...", then "Cisplatin causes ..." and "Magnesium reduced it."
    assert (tmp_path / "a" / "train_mentions.txt").read_text().splitlines() == ["Cisplatin", "Cisplatin", "Magnesium"]
    assert (tmp_path / "a" / "test_mentions.txt").read_text() == ""
    code, stdout, err = run_cli(argv + ["--out", str(tmp_path / "b")], capsys)
    assert code == 0 and "reusing cached silver chemical NER set" in err
    assert (tmp_path / "b" / "train.tsv").read_bytes() == (tmp_path / "a" / "train.tsv").read_bytes()
    code, _, err = run_cli(argv[:-2] + ["--sizes", "1,2", "--out", str(tmp_path / "c")], capsys)
    assert code == 2 and "TRAIN,DEVEL,TEST" in err
