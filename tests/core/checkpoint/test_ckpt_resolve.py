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


def test_best_is_accepted_wherever_latest_is_and_a_run_means_its_best(tmp_path):
    """A fine-tuning run keeps every epoch and marks the best one; the run directory (or its checkpoints
    directory) means that best checkpoint, ``checkpoints/best`` names it, ``checkpoints/latest`` the newest."""
    root = tmp_path / "checkpoints"
    for n in (1, 2):
        (root / f"step_{n}").mkdir(parents=True)
        (root / f"step_{n}" / "metadata.json").write_text("{}")
    (root / "latest").write_text("step_2\n")
    assert resolve(str(tmp_path)) == str(root / "step_2")  # no best yet: the latest
    (root / "best").write_text("step_1\n")
    for given in (tmp_path, root, root / "best"):
        assert resolve(str(given)) == str(root / "step_1")
    assert resolve(str(root / "latest")) == str(root / "step_2")
    (root / "best").write_text("step_7\n")
    with pytest.raises(CheckpointError, match="best names 'step_7', which does not exist"):
        resolve(str(tmp_path))
