"""Damaged checkpoints are refused with one clear line naming what is wrong, before anything is loaded."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from mwb.core.checkpoint import Checkpoint
from mwb.core.config import RunConfig, dump_yaml, update
from mwb.core.errors import CheckpointError
from tests.core.checkpoint.ckpt_workers import tree


@pytest.fixture
def copy(saved, tmp_path):
    dst = str(tmp_path / "step_2")
    shutil.copytree(saved["path"], dst)
    return dst


def edit_meta(path, fn):
    meta_path = os.path.join(path, "metadata.json")
    meta = json.load(open(meta_path))
    fn(meta)
    json.dump(meta, open(meta_path, "w"))


def refused(path) -> str:
    with pytest.raises(CheckpointError) as e:
        Checkpoint(path)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.multiprocess
def test_missing_shard(copy):
    os.remove(os.path.join(copy, "shard_00001.safetensors"))
    msg = refused(copy)
    assert "missing shard shard_00001.safetensors" in msg and "rank 1" in msg


@pytest.mark.multiprocess
def test_truncated_shard(copy):
    path = os.path.join(copy, "shard_00002.safetensors")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 100)
    assert "shard_00002.safetensors is truncated" in refused(copy)


@pytest.mark.multiprocess
def test_damaged_shard_of_right_size(copy):
    path = os.path.join(copy, "shard_00000.safetensors")
    with open(path, "r+b") as f:
        f.write(b"\xff" * 16)  # the header length and the start of the JSON header
    with pytest.raises(CheckpointError, match="shard_00000.safetensors cannot be read"):
        Checkpoint(copy).model_tensor("embed.word.weight")


@pytest.mark.multiprocess
@pytest.mark.parametrize("change,needle", [
    (lambda m: m["layout"].update(tp=3), "wrong layout description"),
    (lambda m: m["layout"].update(tp=4, pp=1, dp=1), "wrong layout description"),
    (lambda m: m["layout"].update(world_size=8), "wrong layout description"),
    (lambda m: m["tensors"]["final_norm.weight"].update(chunks=[]), "final_norm.weight is incomplete"),
    (lambda m: m.update(format="something-else"), "unsupported checkpoint format"),
])
def test_wrong_metadata(copy, change, needle):
    edit_meta(copy, change)
    assert needle in refused(copy)


@pytest.mark.multiprocess
def test_resume_with_missing_shard_is_one_line_exit_1(saved, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(saved["path"], run / "checkpoints" / "step_2")
    (run / "checkpoints" / "latest").write_text("step_2\n")
    dump_yaml(update(RunConfig(), dict(tree(), data={"data": ["synthetic"]})), str(run / "config.yaml"))
    os.remove(run / "checkpoints" / "step_2" / "shard_00003.safetensors")
    proc = subprocess.run([sys.executable, "-m", "mwb", "pretrain", "gpt", "--resume", "--out", str(run),
                           "--steps", "3"], capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and "missing shard shard_00003.safetensors" in lines[0], proc.stderr
    proc = subprocess.run([sys.executable, "-m", "mwb", "checkpoint", "inspect", str(run)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "missing shard shard_00003.safetensors" in proc.stderr
