"""``mwb compare``: the JSON it prints (checked against scipy's binomial test and the seeds' own means), the text
form, comma-separated seeds, and bad input as one line on stderr (mismatched ids, a broken file: exit 1; unequal
seed counts: exit 2). With no arguments it prints its help."""
import json

import numpy as np
import pytest
from scipy.stats import binomtest

from mwb.evaluation.predictions import write_predictions
from tests.helpers.cli import run_cli


def write_run(path, values, ids=None, metric="em"):
    ids = ids or [f"q{i}" for i in range(len(values))]
    return write_predictions(str(path), [{"id": i, "prediction": "p", "gold": "g", metric: v}
                                         for i, v in zip(ids, values)])


def one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(21)
    a = (rng.random(120) < 0.5).astype(int)
    b = np.where(rng.random(120) < 0.3, 1 - a, a)
    b[:10] = 1
    return tmp_path, a, b, write_run(tmp_path / "a", a.tolist()), write_run(tmp_path / "b", b.tolist())


def test_json_output_values(pair, capsys):
    tmp, a, b, pa, _ = pair
    code, out, err = run_cli(["compare", pa, str(tmp / "b"), "--metric", "em", "--json", "--resamples", "2000",
                              "--seed", "3"], capsys)
    assert code == 0, err
    d = json.loads(out)
    b01, b10 = int(np.sum((a == 0) & (b == 1))), int(np.sum((a == 1) & (b == 0)))
    assert d["test"] == "mcnemar-exact" and d["p"] == pytest.approx(binomtest(b01, b01 + b10, 0.5).pvalue)
    assert d["mean_a"] == pytest.approx(a.mean()) and d["mean_b"] == pytest.approx(b.mean())
    assert d["diff"] == pytest.approx(b.mean() - a.mean()) and d["ci95"][0] < d["diff"] < d["ci95"][1]
    assert (d["n_items"], d["n_seeds"], d["resamples"], d["seed"], d["metric"]) == (120, 1, 2000, 3, "em")


def test_text_output(pair, capsys):
    tmp, a, b, pa, pb = pair
    code, out, err = run_cli(["compare", pa, pb, "--metric", "em", "--resamples", "2000"], capsys)
    assert code == 0, err
    rows = {line[:8].strip(): line[8:] for line in out.splitlines()}  # "mean A  0.5", "p       0.03 (...)"
    assert float(rows["mean A"].split()[0]) == pytest.approx(a.mean(), rel=1e-5)
    assert float(rows["mean B"].split()[0]) == pytest.approx(b.mean(), rel=1e-5)
    assert float(rows["diff"].split()[0]) == pytest.approx(b.mean() - a.mean(), rel=1e-5)
    lo, hi = (float(x) for x in rows["95% CI"].split("]")[0].strip("[ ").split(","))
    assert lo < b.mean() - a.mean() < hi
    assert "(mcnemar-exact)" in rows["p"] and "120 paired items" in rows["metric"]


def test_comma_separated_seeds(tmp_path, capsys):
    a0, b0 = write_run(tmp_path / "a0", [0.1, 0.2, 0.3], metric="s"), write_run(tmp_path / "b0", [0.2, 0.4, 0.3],
                                                                                  metric="s")
    a1, b1 = write_run(tmp_path / "a1", [1.0, 1.5], metric="s"), write_run(tmp_path / "b1", [1.0, 2.5], metric="s")
    code, out, err = run_cli(["compare", f"{a0},{tmp_path / 'a1'}", f"{b0}, {b1}", "--metric", "s", "--json",
                              "--resamples", "2000"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["n_seeds"] == 2 and d["n_items"] == 3 and d["test"] == "two-level"  # ids q0, q1 in both seeds
    assert d["mean_a"] == pytest.approx((0.2 + 1.25) / 2) and d["mean_b"] == pytest.approx((0.3 + 1.75) / 2)
    assert d["seed_diffs"] == pytest.approx([0.1, 0.5]) and d["p"] == max(d["p_items"], d["p_seeds"])
    code, out, err = run_cli(["compare", f"{a0},{a1},{a0}", f"{b0},{b1}", "--metric", "s"], capsys)
    assert code == 2 and "A lists 3 runs and B lists 2" in one_line(err)


def test_runs_per_seed_give_the_reports_two_level_row():
    """The committed msdp report's predictions through `mwb compare A_s0,...,A_sN B_s0,...,B_sN --json`, every seed
    the report ran: the same row as the report's two-level reanalysis of the same files (mwb.repro.reanalysis)."""
    import subprocess
    import sys
    from pathlib import Path

    from mwb.repro import reanalysis
    root = Path(__file__).resolve().parents[2] / "reproductions" / "msdp"
    seeds = sorted(p.name for p in (root / "predictions" / "two-stage").glob("seed*.jsonl"))
    assert len(seeds) >= 2, seeds
    files = lambda c: ",".join(str(root / "predictions" / c / s) for s in seeds)  # noqa: E731
    proc = subprocess.run([sys.executable, "-m", "mwb", "compare", files("knowledge-free"), files("two-stage"),
                           "--metric", "kf1", "--json"], capture_output=True, text=True, check=True)
    d = json.loads(proc.stdout)
    row = [r for r in reanalysis.reanalyze(str(root)) if r["headline"]][0]
    for k in ("p", "p_items", "p_seeds", "diff", "ci95", "n_items", "n_seeds", "seed_diffs", "test"):
        assert d[k] == row[k], k


def test_mismatched_ids_one_line_exit_1(tmp_path, capsys):
    pa = write_run(tmp_path / "a", [1, 0, 1, 1], ids=["x", "y", "z", "w"])
    pb = write_run(tmp_path / "b", [1, 0, 1], ids=["x", "y", "v"])
    code, out, err = run_cli(["compare", pa, pb, "--metric", "em"], capsys)
    line = one_line(err)
    assert code == 1 and out == ""
    assert line.startswith("mwb: error: ") and "2 of A's ids missing in B" in line and "1 of B's missing in A" in line


def test_bad_file_one_line_exit_1(tmp_path, capsys):
    pa = write_run(tmp_path / "a", [1, 0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q0", "em": 1}\n{"id": "q1", "em": \n')
    code, _, err = run_cli(["compare", pa, str(bad), "--metric", "em"], capsys)
    line = one_line(err)
    assert code == 1 and str(bad) in line and "line 2: not valid JSON" in line
    code, _, err = run_cli(["compare", pa, str(tmp_path / "missing.jsonl"), "--metric", "em"], capsys)
    assert code == 1 and "predictions file not found" in one_line(err)
    code, _, err = run_cli(["compare", pa, pa, "--metric", "accuracy"], capsys)
    assert code == 1 and "has no metric 'accuracy' (it has: em)" in one_line(err)


def test_no_arguments_prints_help(capsys):
    code, out, err = run_cli(["compare"], capsys)
    assert code == 0 and "Usage: mwb compare" in out and "--metric" in out and err == ""
