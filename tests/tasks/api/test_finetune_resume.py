"""``mwb finetune TASK`` killed with SIGKILL mid-training at ``--nproc 2`` and rerun with ``--resume``: the same
per-step losses, the same per-epoch dev metrics and the same results as a run that was never interrupted.

An encoder task (RACE, multiple choice on a tiny BERT) and a generative one (prompt-target on a tiny GPT, whose
results add the greedy generations of the best checkpoint). Each run has several epochs and checkpoints every
two steps, so the kill usually lands after an epoch's evaluation: the resumed run must keep the epochs and the
best checkpoint it had before the kill, not only train the same steps.
"""
import json
import os

import pytest

from mwb.tasks.race.sample import write_race_sample
from mwb.tasks.text.prompt_target import PromptTarget
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.interrupt import kill_after_checkpoint, train_losses


def _race(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "bert"), "bert-tiny", seq=64, num_layers=1, hidden_size=32,
                           num_attention_heads=2)
    data = write_race_sample(str(tmp_path / "race"), {"train": 4, "dev": 2}, seed=3, easy=True)
    return ["race", "--checkpoint", ckpt, "--data", data, "--seq-length", "64"], len_train(data, "race")


def _prompt_target(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=1, hidden_size=32,
                           num_attention_heads=2)
    rows = PromptTarget().read(PromptTarget.default_data, "train")
    d = tmp_path / "pt"
    d.mkdir()
    for split, part in (("train", rows[:16]), ("dev", rows[16:20])):
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return ["prompt-target", "--checkpoint", ckpt, "--data", str(d), "--seq-length", "64", "--max-tokens", "4"], 16


def len_train(data, task):
    from mwb.tasks.api.registry import get_task
    t = get_task(task)()
    return len(t.read(data, t.train_split))


@pytest.mark.multiprocess
@pytest.mark.parametrize("make", [_race, _prompt_target], ids=["race", "prompt-target"])
def test_sigkill_then_resume_matches_the_uninterrupted_run(tmp_path, make, capsys):
    args, n_train = make(tmp_path)
    gbs = 4
    epochs = 3
    steps = (n_train // gbs) * epochs
    assert steps >= 6
    common = [*args, "--epochs", str(epochs), "--lr", "2e-3", "--global-batch-size", str(gbs),
              "--micro-batch-size", "2", "--nproc", "2", "--save-interval", "2", "--set", "logging.progress=false"]
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    code, _, err = run_cli(["finetune", *common, "--out", ref], capsys)  # in-process: one import fewer
    assert code == 0, err
    killed_at = kill_after_checkpoint(["finetune", *common, "--out", run], os.path.join(run, "checkpoints"), steps)
    assert not os.path.exists(os.path.join(run, "results.json"))
    code, _, err = run_cli(["finetune", *common, "--out", run, "--resume"], capsys)
    assert code == 0, err

    want, got = train_losses(ref), train_losses(run)
    assert sorted(want) == list(range(1, steps + 1)) and got == want, killed_at  # bit-identical, every step
    a, b = (json.load(open(os.path.join(d, "results.json"))) for d in (ref, run))
    assert b["epochs"] == a["epochs"] and len(a["epochs"]) == epochs   # every epoch's dev metrics
    assert b["metrics"] == a["metrics"]                                # the best epoch's (and generations')
    assert os.path.basename(b["best_checkpoint"]) == os.path.basename(a["best_checkpoint"])
    pa, pb = (open(os.path.join(d, "predictions.jsonl")).read() for d in (ref, run))
    assert pa and pb == pa
