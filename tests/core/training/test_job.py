"""The job skeleton: an error raised inside one rank of a ``--nproc N`` job reaches the launching process as
one RankError; checks that can run before launching do.

The rank function is tiny and test-only; it goes through :func:`run_job` and the real elastic launcher, so
the test sees what ``mwb ... --nproc 2`` sees: which rank failed, the error's kind (its exit status), the
rank's own traceback, and that the healthy rank is stopped instead of left running.
"""
import os
import time

import pytest

from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.errors import CheckpointError, DataError, RankError, error_kind
from mwb.core.parallel.dims import LayoutError
from mwb.core.training.job import run_job


def fail_on_rank_one(what: str) -> None:
    """Rank 1 raises a DataError; rank 0 would sleep for ten minutes unless the launcher stops it."""
    if int(os.environ["RANK"]) == 1:
        raise DataError(f"{what} is corrupt")
    time.sleep(600)


@pytest.mark.multiprocess
def test_rank_error_names_the_rank_and_stops_the_other_rank():
    prepared = []

    def prepare(dims):
        prepared.append(dims.world_size)
        return ("shard 7",)

    t0 = time.time()
    with pytest.raises(RankError) as info:
        run_job(RunConfig(), 2, fail_on_rank_one, prepare)
    assert prepared == [2]  # once, in the launching process
    e = info.value
    assert (e.rank, e.kind, e.message) == (1, "runtime", "shard 7 is corrupt")
    assert "fail_on_rank_one" in e.traceback and "DataError" in e.traceback  # the rank's own, for --debug
    assert time.time() - t0 < 120  # rank 0 was stopped, not waited for


def test_error_kinds_decide_the_exit_status():
    assert error_kind(ConfigError("x")) == error_kind(LayoutError("x")) == "usage"  # exit 2
    assert error_kind(DataError("x")) == error_kind(CheckpointError("x")) == "runtime"  # exit 1
    assert error_kind(FileNotFoundError("x")) == "runtime"
    assert error_kind(ZeroDivisionError("x")) == "internal"  # a bug: exit 1 with the rank's traceback


def test_a_rank_killed_without_a_record_is_still_named(tmp_path):
    """Killed by a signal (out of memory, kill -9): no error record, so the launcher's failure names it."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from mwb.core.training.launch import rank_failure

    failed = ChildFailedError("rank_main", {1: ProcessFailure(local_rank=1, pid=4242, exitcode=-9,
                                                              error_file=str(tmp_path / "none.json"))})
    e = rank_failure(str(tmp_path), failed)
    assert (e.rank, e.kind) == (1, "runtime") and "signal SIGKILL" in e.message


def test_checks_before_launching(tmp_path):
    """A layout that does not fit, or a resume checkpoint that is not there, fails before prepare runs."""
    def prepare(dims):
        raise AssertionError("prepare ran")

    with pytest.raises(LayoutError):
        run_job(update(RunConfig(), {"parallel": {"tp": 2}}), 3, fail_on_rank_one, prepare)  # tp 2 on 3 ranks
    (tmp_path / "latest").write_text("step_5\n")
    with pytest.raises(CheckpointError, match="names 'step_5'"):
        run_job(RunConfig(), 1, fail_on_rank_one, prepare, resume=str(tmp_path))
