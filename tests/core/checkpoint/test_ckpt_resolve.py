"""Every way a user names a checkpoint resolves to the same step directory."""
import pytest

from mwb.core.checkpoint.consolidate import resolve
from mwb.core.errors import CheckpointError


def test_run_dir_checkpoints_dir_latest_file_and_step_dir(tmp_path):
    step = tmp_path / "checkpoints" / "step_3"
    step.mkdir(parents=True)
    (step / "metadata.json").write_text("{}")
    (tmp_path / "checkpoints" / "latest").write_text("step_3\n")
    want = str(step)
    for given in (tmp_path, tmp_path / "checkpoints", tmp_path / "checkpoints" / "latest", step):
        assert resolve(str(given)) == want
    with pytest.raises(CheckpointError, match="not found"):
        resolve(str(tmp_path / "nope"))
