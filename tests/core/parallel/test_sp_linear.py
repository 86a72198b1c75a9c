"""The sequence-parallel column linear keeps only the local sequence shard for backward (Megatron's
LinearWithGradAccumulationAndAsyncCommunication idea) and equals one process's plain linears (2 gloo ranks)."""
import pytest

from tests.core.parallel.sp_linear_workers import check_sp_linear
from tests.helpers.distributed import run_ranks


@pytest.mark.multiprocess
@pytest.mark.parametrize("plain_gemm", [False, True], ids=["sp_linear", "old_path"])
def test_sp_column_linear_saves_local_shard_and_matches_plain(plain_gemm):
    world = 2
    for rank, res in enumerate(run_ranks(check_sp_linear, world, plain_gemm)):
        for key in ("out", "grad_input", "grad_weight", "grad_bias"):
            assert res[key], f"rank {rank}: {key} differs from the one-process linears"
        # new path: the [b, s/t, h] shard once (shared by both linears); old path: the gathered [b, s, h]
        expected = res["local_bytes"] * (world if plain_gemm else 1)
        assert res["saved_bytes"] == expected, f"rank {rank}: saved {res['saved_bytes']} B, want {expected}"
