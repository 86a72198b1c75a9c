"""``mwb finetune e2e-qa`` killed with SIGKILL between two index refreshes and rerun with ``--resume``: the same
per-step losses, retrieving from the same index version (embedded by the same step's weights) at every step, and
the same held-out numbers before and after, as a run that was never interrupted.

The refresh is every 4 steps and a checkpoint every step, so the kill lands at step 1–3: a resumed run that
re-embedded the evidence from its checkpoint's weights would retrieve from weights the uninterrupted run never
used until step 4.
"""
import json
import os

import pytest

pytest.importorskip("faiss")

from tests.helpers.interrupt import kill_after_checkpoint, run_mwb

from .test_e2e_start import start  # noqa: F401  (the module's start: a tiny ICT retriever, a reader)

STEPS, EVERY = 6, 4


def _records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: (r["loss"], r["index_version"], r["index_weights_step"])
                for r in map(json.loads, f) if "split" not in r}


@pytest.mark.parametrize("method", ["individual"])
def test_sigkill_then_resume_keeps_the_index_version_and_losses(start, method, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    common = ["finetune", "e2e-qa", "--retriever", start["ict"], "--reader", start["reader"], "--method", method,
              "--evidence", start["ev"], "--questions", start["q"], "--steps", str(STEPS), "--lr", "1e-3",
              "--refresh-every", str(EVERY), "--top-k", "3", "--reader-length", "48", "--micro-batch-size", "2",
              "--global-batch-size", "2", "--eval-questions", "0", "--save-interval", "1",
              "--set", "logging.progress=false"]
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    run_mwb(*common, "--out", ref)
    killed = kill_after_checkpoint([*common, "--out", run], os.path.join(run, "checkpoints"), STEPS)
    run_mwb(*common, "--out", run, "--resume")

    want, got = _records(ref), _records(run)
    assert sorted(want) == list(range(1, STEPS + 1))
    assert [v[1:] for v in want.values()] == [(0, 0)] * 4 + [(1, 4)] * 2  # the refresh schedule itself
    assert got == want, killed   # losses, index version and the step that embedded it, step by step
    a, b = (json.load(open(os.path.join(d, "results.json")))["metrics"] for d in (ref, run))
    a.pop("train_seconds"), b.pop("train_seconds")
    assert b == a                 # held-out top-k / EM after, and before (the start's, not the resumed weights')
    assert any(k.endswith("_before") for k in a)
