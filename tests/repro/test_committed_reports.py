"""Every comparison row of every committed report (reproductions/*/results.json) recomputed from its own
predictions by the method it was made with (reports without a "statistics" name: the legacy pooled test), and
the two-level verdict on the same predictions checked against scipy at the seed level."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from scipy import stats as sps

from mwb.repro import index, reanalysis

ROOT = Path(__file__).resolve().parents[2] / "reproductions"
REPORTS = sorted(p.name for p in ROOT.iterdir() if (p / "results.json").is_file()) if ROOT.is_dir() else []
SEEDED = [n for n in REPORTS if not json.loads((ROOT / n / "results.json").read_text()).get("deterministic")]
KEYS = ("mean_a", "mean_b", "diff", "p", "n_items", "n_seeds", "verdict")


@pytest.mark.parametrize("name", SEEDED)
def test_every_committed_row_is_recomputed_from_its_predictions(name):
    d = str(ROOT / name)
    res = reanalysis.read(d)
    again = reanalysis.recompute_old(d, res)
    assert len(again) == len(res["comparisons"])
    for was, now in zip(res["comparisons"], again):
        for k in KEYS:
            want = was[k]
            assert now[k] == (pytest.approx(want, rel=1e-9, abs=1e-12) if isinstance(want, float) else want), (k, was)
        assert now["test"] == was["test"]
        if was.get("ci95"):
            assert now["ci95"] == pytest.approx(was["ci95"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", SEEDED)
def test_two_level_verdict_on_the_committed_predictions(name):
    d = str(ROOT / name)
    res = reanalysis.read(d)
    single = reanalysis.seed_independent(name)
    for row in reanalysis.reanalyze(d, res):
        per_seed = res["conditions"]
        a, b = per_seed[row["a"]][row["metric"]], per_seed[row["b"]][row["metric"]]
        a = a[:1] if row["a"] in single else a
        b = b[:1] if row["b"] in single else b
        if len(a) == 1:
            a = a * len(b)
        if len(b) == 1:
            b = b * len(a)
        diffs = [y - x for x, y in zip(a, b)]
        assert row["seed_diffs"] == pytest.approx(diffs, rel=1e-9, abs=1e-12)
        ref = 1.0 if all(x == 0 for x in diffs) else sps.ttest_rel(b, a).pvalue  # scipy: NaN for no change
        assert row["p_seeds"] == pytest.approx(ref, rel=1e-6)
        if row["test"] == "two-level":
            assert row["p"] == pytest.approx(max(row["p_items"], row["p_seeds"]))
        assert row["verdict"] in (("shown", "contradicted", "not shown") if row["headline"] else ("exploratory",))


def test_msdp_two_level_p_equals_the_item_level_p_of_its_8_turns():
    """The re-run msdp report (5 seeds, the two-level test): its 8 turns each count once at the item level."""
    row = [r for r in reanalysis.reanalyze(str(ROOT / "msdp")) if r["headline"]][0]
    assert row["n_items"] == 8 and row["n_seeds"] == 5 and row["verdict"] == "not shown"
    assert row["p_items"] == pytest.approx(50 / 256)  # 2^8 = 256 sign flips enumerated: 50 as extreme
    committed = json.loads((ROOT / "msdp" / "results.json").read_text())
    head = next(c for c in committed["comparisons"] if c["headline"])
    assert committed["statistics"] and head["p_items"] == pytest.approx(50 / 256) and head["p"] == pytest.approx(
        max(head["p_items"], head["p_seeds"]))


def test_report_page_renders_the_committed_reports_marking_the_old_format(tmp_path):
    page = tmp_path / "reproductions.md"
    assert index.write_index(str(ROOT), str(page)) == len(REPORTS)
    text = page.read_text()
    for name in SEEDED:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {name} |"))
        old = "statistics" not in json.loads((ROOT / name / "results.json").read_text())
        assert ("old format: legacy pooled test" in line) == old, name
    cntrl = next(ln for ln in text.splitlines() if ln.startswith("| megatron-cntrl |"))
    assert "shown" in cntrl


def test_a_report_of_a_changed_design_is_marked_and_an_unchanged_one_is_not():
    """index.definition_changed: the msdp report (5 seeds of the code's design) matches; the same
    report under another recorded hash does not; a report from before the hash is compared by its results.json
    (scale params, conditions, comparisons), so one changed scale setting marks it."""
    rec = json.loads((ROOT / "msdp" / "results.json").read_text())
    env = json.loads((ROOT / "msdp" / "env.json").read_text())
    assert len(rec["seeds"]) == 5 and not index.definition_changed(rec, env)
    assert index.definition_changed(rec, {**env, "definition_hash": "0" * 16})
    legacy = {k: v for k, v in env.items() if k not in ("definition_hash", "definition")}
    assert not index.definition_changed(rec, legacy)
    steps = next(k for k, v in rec["scale_params"].items() if isinstance(v, int) and not isinstance(v, bool))
    bumped = {**rec["scale_params"], steps: rec["scale_params"][steps] + 1}
    assert index.definition_changed({**rec, "scale_params": bumped}, legacy)
    assert index.definition_changed({**rec, "comparisons": rec["comparisons"][1:]}, legacy)
    assert index.definition_changed({**rec, "scale": "no-such-scale"}, legacy)
