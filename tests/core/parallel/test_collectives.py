"""Each differentiable collective: forward as specified, backward its conjugate (2 gloo ranks)."""
import pytest

from tests.helpers.collective_checks import check_collectives, check_vocab_parallel
from tests.helpers.distributed import run_ranks


@pytest.mark.multiprocess
def test_collectives_forward_and_backward():
    for rank, res in enumerate(run_ranks(check_collectives, 2)):
        failed = [k for k, ok in res.items() if not ok]
        assert not failed, f"rank {rank}: {failed}"


@pytest.mark.multiprocess
def test_vocab_parallel_cross_entropy_and_embedding():
    for rank, res in enumerate(run_ranks(check_vocab_parallel, 2)):
        failed = [k for k, ok in res.items() if not ok]
        assert not failed, f"rank {rank}: {failed}"
