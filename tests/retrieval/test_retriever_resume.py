"""Retriever training killed with SIGKILL mid-run and rerun with ``--resume`` (issue 37, item 5): ``mwb pretrain
ict``, ``mwb pretrain mss`` and ``mwb finetune dpr`` end with the same per-step losses and the same final numbers
as a run that was never interrupted.

A checkpoint is saved every step, and the run is killed as soon as the first one exists, so the resumed run
restores the model, the optimizer, the schedule and the data position from a step in the middle of the run.
"""
import json
import os

import numpy as np
import pytest

pytest.importorskip("faiss")

from tests.helpers.interrupt import kill_after_checkpoint, run_mwb, train_losses

from .retrieval_helpers import make_tokenizer, passages, sentence_text, write_dpr_json
from .test_e2e_start import START_LENGTH, TINY

STEPS = 6
NAMES = ("Cromer", "Babbage", "Lovelace", "Faraday", "Darwin", "Newton", "Kelvin", "Maxwell")


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """Evidence whose passages each hold a year and a name (salient spans for MSS), a tokenizer, an ICT start."""
    d = tmp_path_factory.mktemp("retriever-resume")
    tok = make_tokenizer(str(d / "tok"))
    texts = passages(16, seed=5, length=20)
    rng = np.random.default_rng(3)
    with open(d / "ev.tsv", "w") as f:
        f.write("id\ttext\ttitle\n")
        for i, t in enumerate(texts):
            salient = f"In {1800 + int(rng.integers(200))} {NAMES[i % len(NAMES)]} wrote it."
            f.write(f"p{i}\t{sentence_text(t)} {salient}\tw{i}\n")
    common = ["--evidence", str(d / "ev.tsv"), "--tokenizer", tok, "--seq-length", str(START_LENGTH),
              "--query-length", "8", "--micro-batch-size", "4", "--global-batch-size", "4", "--eval-interval", "0",
              *TINY, "--set", "logging.progress=false"]
    ict = str(d / "ict")
    run_mwb("pretrain", "ict", *common, "--steps", "2", "--out", ict)
    return {"common": common, "ict": ict, "dpr": write_dpr_json(str(d / "dpr.json"), 16, seed=6)}


def _argv(kind: str, start: dict) -> list[str]:
    if kind == "dpr":
        return ["finetune", "dpr", "--checkpoint", start["ict"], "--data", start["dpr"], "--lr", "1e-3",
                "--micro-batch-size", "4", "--global-batch-size", "4", "--eval-interval", "0",
                "--set", "logging.progress=false"]
    if kind == "mss":  # MSS continues a retriever (the ICT start here; by default minilm-l6 where installed)
        return ["pretrain", "mss", "--checkpoint", start["ict"], *start["common"]]
    return ["pretrain", kind, *start["common"]]


def _final(out: str) -> dict:
    with open(os.path.join(out, "results.json")) as f:
        metrics = json.load(f).get("metrics", {})
    return {k: v for k, v in metrics.items() if "second" not in k and "tokens_per" not in k}


@pytest.mark.parametrize("kind", ["ict", "mss", "dpr"])
def test_sigkill_then_resume_ends_as_the_uninterrupted_run(start, kind, tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    argv = [*_argv(kind, start), "--steps", str(STEPS), "--save-interval", "1"]
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    run_mwb(*argv, "--out", ref)
    killed = kill_after_checkpoint([*argv, "--out", run], os.path.join(run, "checkpoints"), STEPS)
    run_mwb(*argv, "--out", run, "--resume")
    want = train_losses(ref)
    assert sorted(want) == list(range(1, STEPS + 1)) and len(set(want.values())) > 1
    assert train_losses(run) == want, killed
    if os.path.exists(os.path.join(ref, "results.json")):
        assert _final(run) == _final(ref)
