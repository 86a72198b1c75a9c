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
