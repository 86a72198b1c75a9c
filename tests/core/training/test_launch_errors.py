"""An error raised inside one rank of a ``--nproc N`` job reaches the launching process as one RankError.

The rank function is tiny and test-only; it goes through the real elastic launcher (:func:`launch`), so the
test sees what ``mwb ... --nproc 2`` sees: which rank failed, the error's kind (its exit status), the
rank's own traceback, and that the healthy rank is stopped instead of left running.
"""
import os
import time

import pytest

from mwb.core.config import ConfigError
from mwb.core.errors import CheckpointError, DataError, RankError, error_kind
from mwb.core.parallel.dims import LayoutError
from mwb.core.training.launch import launch


def fail_on_rank_one() -> None:
    """Rank 1 raises a DataError; rank 0 would sleep for ten minutes unless the launcher stops it."""
    if int(os.environ["RANK"]) == 1:
        raise DataError("shard 7 is corrupt")
    time.sleep(600)


@pytest.mark.multiprocess
def test_rank_error_names_the_rank_and_stops_the_other_rank():
    t0 = time.time()
    with pytest.raises(RankError) as info:
        launch(fail_on_rank_one, 2)
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
