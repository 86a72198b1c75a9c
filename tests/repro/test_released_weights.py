"""Paper scale from the released weights (mwb/repro/experiments/released_weights.py): each experiment plans
with ``--dry-run`` on paths that do not exist (the paper's recipe, ``mwb plan``'s estimate), refuses a missing
``--set checkpoint`` and a checkpoint path that does not exist in one line before writing anything, and reads
a finished cell's metrics under the names its paper values use. Nothing here runs a paper scale."""
from __future__ import annotations

import json
import shlex

import pytest

from mwb.core.errors import DataError
from mwb.repro.analysis import Cells, deterministic_comparisons, verdict
from mwb.repro.registry import get_experiment
from tests.helpers.cli import run_cli

DATA = {"megatron-gpt-zero-shot": {"wikitext_data": "/d/wiki.test.tokens", "lambada_data": "/d/lambada_test.jsonl"},
        "megatron-bert-finetune": {"mnli_data": "/d/MNLI", "qqp_data": "/d/QQP", "squad_data": "/d/SQUAD"},
        "biomegatron-released": {"ner_data": "/d/BC5CDR-chem", "chemprot_data": "/d/ChemProt",
                                 "bioasq_data": "/d/BioASQ"}}
CKPT = {"megatron-gpt-zero-shot": "/d/megatron_lm_345m", "megatron-bert-finetune": "/d/megatron_bert_345m",
        "biomegatron-released": "/d/BioMegatron345m-biovocab-30k-cased.nemo"}
# (first word after "mwb", task) of every command each experiment's paper scale runs, in order
COMMANDS = {"megatron-gpt-zero-shot": [("eval", "wikitext"), ("eval", "lambada")],
            "megatron-bert-finetune": [("finetune", "glue"), ("eval", "glue"), ("eval", "glue"), ("finetune", "glue"),
                                       ("eval", "glue"), ("finetune", "squad"), ("finetune", "squad")],
            "biomegatron-released": [("finetune", "ner"), ("eval", "ner"), ("finetune", "chemprot"),
                                     ("eval", "chemprot"), ("finetune", "bioasq"), ("eval", "bioasq")]}


def _sets(name: str, checkpoint: bool = True) -> list:
    pairs = {**({"checkpoint": CKPT[name]} if checkpoint else {}), **DATA[name]}
    return [x for k, v in pairs.items() for x in ("--set", f"{k}={v}")]


@pytest.mark.parametrize("name", sorted(DATA))
def test_paper_scale_dry_run_plans_the_released_checkpoint(name, capsys):
    code, stdout, err = run_cli(["repro", name, "--scale", "paper", "--dry-run", *_sets(name)], capsys)
    assert code == 0, err
    lines = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb ") and not x.startswith("mwb plan")]
    assert [tuple(a[1:3]) for a in lines] == COMMANDS[name]
    starts = {a[a.index("--checkpoint") + 1] for a in lines if a[1] == "finetune" or name.startswith("megatron-gpt")}
    assert starts == {CKPT[name]}  # every run starts from the released weights
    for a in lines:
        if "--data" in a:
            assert a[a.index("--data") + 1] in DATA[name].values()
    assert "mwb plan --preset" in stdout and "s/iteration" in stdout


def test_zero_shot_recipe_is_megatrons():
    exp = get_experiment("megatron-gpt-zero-shot")
    cmds = exp.cell_commands("wikitext103", 0, exp.scale("paper"), "C", {"checkpoint": "K", **DATA[exp.name]})
    a = cmds[0]
    assert {k: a[a.index(k) + 1] for k in ("--seq-length", "--overlap")} == {"--seq-length": "1024", "--overlap": "32"}
    lam = exp.cell_commands("lambada", 0, exp.scale("paper"), "C", {"checkpoint": "K", **DATA[exp.name]})[0]
    assert "--strict" in lam


@pytest.mark.parametrize("name", sorted(DATA))
def test_paper_scale_refuses_a_missing_checkpoint_in_one_line(name, capsys, tmp_path):
    code, _, err = run_cli(["repro", name, "--scale", "paper", "--dry-run", *_sets(name, checkpoint=False)], capsys)
    assert code == 2 and "needs --set checkpoint=" in err and len(err.strip().splitlines()) == 1
    out = tmp_path / "run"
    code, _, err = run_cli(["repro", name, "--scale", "paper", "--out", str(out), *_sets(name)], capsys)
    assert code == 1 and f"--set checkpoint={CKPT[name]}: no such file or directory" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def _write(path, metrics: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"metrics": metrics}))


def test_finished_cells_are_read_under_the_paper_values_names(tmp_path):
    exp = get_experiment("megatron-bert-finetune")
    scale = exp.scale("paper")
    _write(tmp_path / "mnli", {"accuracy": 0.8971})
    _write(tmp_path / "mnli" / "extra", {"accuracy": 0.8802})
    _write(tmp_path / "sq" / "finetune", {"f1": 0.94, "em": 0.881})  # SQuAD: the fine-tuning run's dev scores
    mnli = exp.read_cell("mnli", 0, scale, str(tmp_path / "mnli"))
    assert mnli.metrics == {"accuracy": 0.8971, "accuracy_mm": 0.8802}
    assert exp.read_cell("squad-1.1", 0, scale, str(tmp_path / "sq")).metrics == {"f1": 0.94, "em": 0.881}
    cells = Cells(("mnli", "squad-1.1"), (0,), {("mnli", 0): mnli,
                                                  ("squad-1.1", 0): exp.read_cell("squad-1.1", 0, scale,
                                                                                  str(tmp_path / "sq"))})
    rows = {(r["b"], r["metric"]): r for r in deterministic_comparisons(exp.paper_values, cells)}
    assert rows[("mnli", "accuracy")]["within"] and not rows[("mnli", "accuracy_mm")]["within"]  # 88.0 vs 90.0
    assert rows[("squad-1.1", "f1")]["within"]
    assert verdict(exp, list(rows.values())) == "not shown"  # QQP and SQuAD 2.0 were not run
    _write(tmp_path / "bad", {"loss": 1.0})
    with pytest.raises(DataError, match="reports no 'accuracy'"):
        exp.read_cell("qqp", 0, scale, str(tmp_path / "bad"))
