"""--async-save: training goes on while a checkpoint is written, the checkpoint is the one a synchronous save
writes, it never looks complete before it is, background errors surface as one line, and kill -9 during an
async save resumes from the previous complete checkpoint. Saves are held open by the writer's test gate
(``MWB_ASYNC_SAVE_GATE``), never by sleeps."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from mwb.core import checkpoint
from mwb.core.checkpoint import async_save
from mwb.core.errors import CheckpointError
from tests.core.checkpoint.ckpt_workers import tree
from tests.helpers.distributed import run_ranks
from tests.helpers.interrupt import latest_step, mwb_env, run_mwb, train_losses
from tests.helpers.workers import make_trainer


def _async_tree(**parallel) -> dict:
    t = tree(**parallel)
    t["train"]["async_save"] = True
    return t


def _wait_for(path: str, proc=None, timeout: float = 240.0) -> None:
    """Poll for ``path`` (a gate marker); fails if ``proc`` ends first. (A bound on hanging, not a timing.)"""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc is None or proc.poll() is None, "the run ended before the save was held"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _contents(directory: str) -> tuple[dict, dict]:
    meta = json.load(open(os.path.join(directory, "metadata.json")))
    tensors = {}
    for f in sorted(meta["files"]):
        tensors.update({f"{f}:{k}": v for k, v in load_file(os.path.join(directory, f)).items()})
    return meta, tensors


def _same_checkpoint(a: str, b: str) -> None:
    meta_a, ta = _contents(a)
    meta_b, tb = _contents(b)
    for key in ("tensors", "files", "rng", "step", "layout", "consumed_samples", "optimizer", "scaler"):
        assert meta_a[key] == meta_b[key], key
    assert sorted(ta) == sorted(tb)
    for k in ta:
        torch.testing.assert_close(ta[k], tb[k], rtol=0, atol=0, msg=k)


def test_training_goes_on_while_the_save_is_held_and_the_result_equals_a_sync_save(tmp_path, monkeypatch):
    gate = str(tmp_path / "gate")
    monkeypatch.setenv(async_save.GATE_ENV, gate)
    root = str(tmp_path / "async")
    trainer = make_trainer(_async_tree(), 1)
    trainer.train_step()
    path = checkpoint.save(trainer, root)
    _wait_for(os.path.join(gate, "step_1.started"))
    assert not os.path.exists(path) and latest_step(root) == 0  # in flight: nothing looks complete
    after = trainer.train_step().loss  # the step goes on (and changes the weights the save copied)
    open(os.path.join(gate, "step_1.go"), "w").close()
    assert checkpoint.wait_for_save(trainer) == path and latest_step(root) == 1
    assert not [n for n in os.listdir(path) if n.startswith(".")]  # no writer markers left behind

    ref = make_trainer(tree(), 1)
    ref.train_step()
    _same_checkpoint(path, checkpoint.save(ref, str(tmp_path / "sync")))
    assert ref.train_step().loss == after


def test_the_next_save_waits_and_checkpoints_commit_in_order(tmp_path):
    root = str(tmp_path / "ck")
    trainer = make_trainer(_async_tree(), 1)
    for _ in range(3):
        trainer.train_step()
        checkpoint.save(trainer, root, keep_last=2)
        assert trainer.pending_save is not None or latest_step(root) == trainer.step
    assert sorted(n for n in os.listdir(root) if n.startswith("step_")) in (["step_1", "step_2"],
                                                                            ["step_2", "step_3"])
    # train.steps 6: a save after every step, and the end of the run waits for the last one
    trainer.run(lambda tr, res, stop: checkpoint.save(tr, root, keep_last=2))
    assert trainer.pending_save is None and latest_step(root) == 6
    assert sorted(n for n in os.listdir(root) if n.startswith("step_")) == ["step_5", "step_6"]


def test_a_background_write_error_is_one_line_and_moves_nothing(tmp_path, monkeypatch):
    def full_disk(tensors, path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(async_save, "write_safetensors", full_disk)
    root = str(tmp_path / "ck")
    trainer = make_trainer(_async_tree(), 1)
    trainer.train_step()
    checkpoint.save(trainer, root)
    trainer.train_step()
    with pytest.raises(CheckpointError) as err:
        checkpoint.wait_for_save(trainer)
    msg = str(err.value)
    assert "\n" not in msg and "No space left on device" in msg and "step_1" in msg
    assert latest_step(root) == 0 and not os.path.exists(os.path.join(root, "step_1"))


def _two_rank_async_then_reload(rank: int, world: int, root: str) -> dict:
    trainer = make_trainer(_async_tree(), world)
    for _ in range(2):
        trainer.train_step()
    path = checkpoint.save(trainer, root)
    trainer.train_step()
    checkpoint.wait_for_save(trainer)
    return {"path": path, "loss": trainer.train_step().loss}


def _two_rank_sync(rank: int, world: int, root: str) -> str:
    trainer = make_trainer(tree(), world)
    for _ in range(2):
        trainer.train_step()
    return checkpoint.save(trainer, root)


def test_two_ranks_async_equals_sync_and_loads_in_one_process(tmp_path):
    a = run_ranks(_two_rank_async_then_reload, 2, str(tmp_path / "async"))
    b = run_ranks(_two_rank_sync, 2, str(tmp_path / "sync"))
    _same_checkpoint(a[0]["path"], b[0])
    one = make_trainer(tree(), 1)
    assert checkpoint.load(one, a[0]["path"]) == 2
    one.train_step()
    assert one.train_step().loss == pytest.approx(a[0]["loss"], rel=1e-6)


SMALL = ["--set", "model.num_layers=2", "--set", "model.hidden_size=32", "--set", "model.num_attention_heads=4",
         "--set", "model.dropout=0", "--seed", "1", "--data", "synthetic", "--seq-length", "16",
         "--micro-batch-size", "2", "--global-batch-size", "4", "--eval-interval", "0", "--eval-steps", "1",
         "--set", "logging.progress=false"]


def test_sigkill_during_an_async_save_resumes_from_the_previous_complete_one(tmp_path):
    steps = ["--steps", "4", "--save-interval", "2", "--async-save"]
    ref, run, gate = str(tmp_path / "ref"), str(tmp_path / "run"), str(tmp_path / "gate")
    run_mwb("pretrain", "gpt", *SMALL, *steps, "--out", ref)
    os.makedirs(gate)
    open(os.path.join(gate, "step_2.go"), "w").close()  # step 2's save goes through, step 4's is held
    env = dict(mwb_env(), **{async_save.GATE_ENV: gate})
    proc = subprocess.Popen([sys.executable, "-m", "mwb", "pretrain", "gpt", *SMALL, *steps, "--out", run],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _wait_for(os.path.join(gate, "step_4.started"), proc)
        os.killpg(proc.pid, signal.SIGKILL)  # while step 4's checkpoint is being written
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    ckpt = os.path.join(run, "checkpoints")
    assert latest_step(ckpt) == 2 and not os.path.exists(os.path.join(ckpt, "step_4"))
    assert os.path.isdir(os.path.join(ckpt, ".step_4.incomplete"))
    resumed = run_mwb("pretrain", "gpt", *SMALL, *steps, "--out", run, "--resume")
    assert "(step 2)" in resumed.stderr
    want = train_losses(ref)
    assert sorted(want) == [1, 2, 3, 4] and len(set(want.values())) > 1
    assert train_losses(run) == want
    assert latest_step(ckpt) == 4 and not os.path.exists(os.path.join(ckpt, ".step_4.incomplete"))
