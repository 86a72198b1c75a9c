"""Joint retriever + reader training: index versions, sync vs async refresh, and layouts vs one process."""
import numpy as np
import pytest

from tests.helpers.distributed import run_ranks

from .e2e_helpers import joint_run, write_qa_evidence
from .retrieval_helpers import make_tokenizer

ONE = {"tp": 1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    tok = make_tokenizer(str(d / "tok"))
    evidence, questions = write_qa_evidence(str(d / "evidence.tsv"))
    return tok, evidence, questions


@pytest.mark.parametrize("method", ["emdr2", "individual"])
def test_version_advances_every_n_steps_and_next_steps_use_it(setup, method):
    tok, evidence, questions = setup
    out = joint_run(ONE, 1, tok, evidence, questions, method, {"every": 2}, steps=5, keep={2, 4})
    assert out["version"] == [0, 0, 1, 1, 2]
    assert out["weights_step"] == [0, 0, 2, 2, 4]
    version, step, emb = out["final_index"]
    assert (version, step) == (2, 4)
    np.testing.assert_allclose(emb, out["snapshots"][4], atol=1e-6)  # the index holds step 4's weights
    assert not np.allclose(out["snapshots"][2], out["snapshots"][4], atol=1e-4)  # and they moved
    assert all(np.isfinite(out["loss"]))


def test_no_refresh_keeps_version_zero(setup):
    tok, evidence, questions = setup
    out = joint_run(ONE, 1, tok, evidence, questions, "emdr2", {"every": 0}, steps=3)
    assert out["version"] == [0, 0, 0] and out["weights_step"] == [0, 0, 0]


def _same(a, b):
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(a["retriever_loss"], b["retriever_loss"], rtol=0, atol=1e-5)
    assert a["version"] == b["version"]


def test_dp2_tp2_and_async_indexer_match_one_process(setup):
    tok, evidence, questions = setup
    ref = {m: joint_run(ONE, 1, tok, evidence, questions, m, {"every": 2}, steps=4) for m in ("emdr2", "individual")}
    ranks = run_ranks(_worker, 2, tok, evidence, questions, timeout_s=600)
    for name in ("dp2", "tp2"):
        for m in ("emdr2", "individual"):
            _same(ranks[0][f"{name}-{m}"], ref[m])
    # async with the indexer forced to finish before the swap = sync: same losses, same index
    trainer, indexer = ranks
    _same(trainer["async"], ref["emdr2"])
    assert indexer["async"] == {"indexer_refreshes": 3}  # version 0, after step 2, after step 4
    assert trainer["async"]["final_index"][:2] == ref["emdr2"]["final_index"][:2] == (2, 4)
    assert trainer["async"]["weights_step"] == ref["emdr2"]["weights_step"]
    # overlapped: weights sent at step 2 are embedded while steps 3-4 train and swapped in at step 4
    overlap = trainer["async-overlap"]
    assert overlap["version"] == [0, 0, 0, 0, 1, 1] and overlap["weights_step"] == [0, 0, 0, 0, 2, 2]
    assert overlap["final_index"][:2] == (2, 4) and indexer["async-overlap"] == {"indexer_refreshes": 3}


def _worker(rank, world, tok, evidence, questions):
    from tests.retrieval.e2e_helpers import layouts_worker
    return layouts_worker(rank, world, tok, evidence, questions)
