"""``mwb repro`` on the command line: the list (text and JSON, with the committed verdict), ``--dry-run`` (the
cells' commands, and at paper scale mwb plan's estimate for the paper's clusters), ``mwb repro report``, and
bad input as one line with exit status 2."""
from __future__ import annotations

import json
import os
import shlex

from mwb.core.plan.paper import TABLE1
from tests.helpers.cli import run_cli

COMMITTED = {
    "experiment": "megatron-scaling", "scale": "cpu", "seeds": [0], "deterministic": True, "verdict": "not shown",
    "paper": [{"citation": "Narayanan et al. 2021", "arxiv": "2104.04473", "title": "Efficient ..."}],
    "claim": "closed forms hold",
    "comparisons": [{"a": "paper", "b": "table1-1t", "metric": "params_b", "paper": 1008.0, "ours": 1008.02,
                     "ratio": 1.00002, "headline": True, "within": True},
                    {"a": "paper", "b": "act-x", "metric": "activation_bytes", "paper": 100.0, "ours": 118.0,
                     "ratio": 1.18, "headline": True, "within": False}],
}


def _commit(root):
    os.makedirs(root / "megatron-scaling")
    (root / "megatron-scaling" / "results.json").write_text(json.dumps(COMMITTED))


def test_list_json_names_papers_claim_metrics_scales_and_the_committed_verdict(tmp_path, capsys):
    code, out, err = run_cli(["repro", "--list", "--json", "--root", str(tmp_path)], capsys)
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    ms = rows["megatron-scaling"]
    assert [p["arxiv"] for p in ms["paper"]] == ["1909.08053", "2104.04473", "2205.05198"]
    assert "Table 1" in ms["claim"] and "params_b" in ms["metrics"] and "activation_bytes" in ms["metrics"]
    assert list(ms["scales"]) == ["smoke", "cpu", "gpu", "paper"] and ms["deterministic"] is True
    assert ms["verdict"] is None and ms["committed"] is None  # nothing committed under this root
    _commit(tmp_path)
    code, out, _ = run_cli(["repro", "--list", "--json", "--root", str(tmp_path)], capsys)
    ms = {r["name"]: r for r in json.loads(out)}["megatron-scaling"]
    assert ms["verdict"] == "not shown" and ms["committed"] == {"verdict": "not shown", "scale": "cpu", "seeds": 1}
    code, out, _ = run_cli(["repro", "--root", str(tmp_path)], capsys)  # no arguments: the list, as text
    assert code == 0 and "megatron-scaling  [deterministic]  —  committed: not shown (cpu, 1 seed(s))" in out


def test_dry_run_prints_commands_and_writes_nothing(tmp_path, capsys):
    out_dir = tmp_path / "never"
    code, out, err = run_cli(["repro", "megatron-scaling", "--scale", "smoke", "--dry-run", "--out", str(out_dir)],
                             capsys)
    assert code == 0, err
    assert not out_dir.exists()
    plans = [shlex.split(x) for x in out.splitlines() if x.startswith("mwb plan")]
    assert len(plans) == 14 and "# act-s32-b2-h64-a4-tp1-selective seed 0: computed in Python" in out
    assert "mwb repro megatron-scaling --scale smoke --out " + str(out_dir) in out


def test_dry_run_at_paper_scale_prints_the_planner_estimate(capsys):
    code, out, err = run_cli(["repro", "megatron-scaling", "--scale", "paper", "--dry-run"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    i = lines.index("# Narayanan et al. 2021 Table 1, 1008 B")
    argv = shlex.split(lines[i + 1])
    assert argv[:4] == ["mwb", "plan", "--preset", "gpt-1t"] and argv[argv.index("--gpus") + 1] == "3072"
    assert argv[argv.index("--tp") + 1] == "8" and argv[argv.index("--pp") + 1] == "64"
    assert "s/iteration" in lines[i + 2] and "GiB per GPU" in lines[i + 2]
    assert "4.5e+11 tokens" in lines[i + 3] and "days" in lines[i + 3] and "MWh" in lines[i + 3]
    assert sum(1 for x in lines if x.startswith("# Narayanan et al. 2021 Table 1,")) == len(TABLE1)


def test_report_writes_the_page_from_committed_results(tmp_path, capsys):
    root, page = tmp_path / "reproductions", tmp_path / "docs" / "reproductions.md"
    _commit(root)
    code, out, err = run_cli(["repro", "report", "--root", str(root), "--out", str(page)], capsys)
    assert code == 0, err
    assert out.startswith(f"wrote {page} (1 reproduction from {root})")
    text = page.read_text()
    row = next(x for x in text.splitlines() if x.startswith("| megatron-scaling |"))
    assert "| cpu | 1 (deterministic) |" in row and "1 of 2 paper values within tolerance" in row
    assert "**not shown**" in row and "[report](../reproductions/megatron-scaling/report.md)" in row


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    for argv, needle in ((["repro", "no-such-experiment"], "unknown experiment 'no-such-experiment' (known: "),
                         (["repro", "megatron-scaling", "--scale", "cpu", "--set", "device=cuda"],
                          "applies to --scale paper"),
                         (["repro", "megatron-scaling", "--scale", "paper", "--set", "data=/x", "--dry-run"],
                          "unknown --set key 'data'")):
        code, out, err = run_cli(argv, capsys)
        lines = [x for x in err.splitlines() if x.strip()]
        assert code == 2 and len(lines) == 1 and needle in lines[0], (argv, err)


def test_seeds_on_a_deterministic_experiment_are_said_not_to_apply(capsys):
    code, out, err = run_cli(["repro", "megatron-scaling", "--scale", "smoke", "--seeds", "2", "--dry-run"], capsys)
    assert code == 0 and "is deterministic (computed values, no training): one run, --seeds 2 does not apply" in err
    assert "# table1-1t seed 0" in out and "seed 1" not in out
    code, out, err = run_cli(["repro", "megatron-scaling", "--scale", "smoke", "--first-seed", "5", "--dry-run"],
                             capsys)
    assert code == 0 and "one run, --first-seed 5 does not apply" in err and "seed 5" not in out
