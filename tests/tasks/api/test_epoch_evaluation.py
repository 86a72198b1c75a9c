"""Fine-tuning's step hook on its own (checkpoints stubbed): an evaluation and a checkpoint at every epoch's
end and the last step, the best one by the dev metric's direction in ``checkpoints/best``, a stop signal or
``--save-interval`` checkpointing between epochs, ``--keep-last`` keeping the best; a hook built for a run
resumed at step N continues the epoch history and the best checkpoint from ``metrics.jsonl``."""
import dataclasses
import json

from mwb.core.config import RunConfig
from mwb.core.training.trainer import StepResult
from mwb.tasks.api import epoch_evaluation
from mwb.tasks.api.epoch_evaluation import EpochEvaluation


class Log:
    def __init__(self, path):
        self.path, self.steps = path, []

    def log_step(self, res):
        self.steps.append(res.step)

    def log_eval(self, step, metrics):
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, "split": "valid", **metrics}) + "\n")


def result(step):
    return StepResult(step, 1.0, 0.1, 1.0, 8, 0.1, 1.0, False)


def stub_checkpoints(monkeypatch):
    saves, prunes = [], []

    def save(trainer, root, extra_files=None, keep_last=None):
        saves.append((trainer["step"], keep_last))
        return f"{root}/step_{trainer['step']}"

    monkeypatch.setattr(epoch_evaluation.checkpoint, "save", save)
    monkeypatch.setattr(epoch_evaluation.checkpoint, "prune", lambda root, k, keep: prunes.append((k, keep)))
    return saves, prunes


def run(hook, steps, stop_at=()):
    for s in steps:
        hook({"step": s}, result(s), s in stop_at)


def test_epochs_checkpoints_and_the_best_by_the_metrics_direction(tmp_path, monkeypatch):
    saves, prunes = stub_checkpoints(monkeypatch)
    (tmp_path / "checkpoints").mkdir()
    cfg = RunConfig()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=7, save_interval=0, keep_last=1))
    losses = iter([2.0, 1.0, 1.5, 1.2])
    log = Log(tmp_path / "metrics.jsonl")
    hook = EpochEvaluation(cfg, str(tmp_path), 0, "dev_loss", 2, lambda tr: ({"dev_loss": next(losses)}, None),
                           log, "tok", start=0)
    run(hook, range(1, 8), stop_at={3})
    assert log.steps == list(range(1, 8))
    # epochs end at 2, 4, 6 and the last step 7 (epoch 4); the stop signal at 3 saves with the default rule
    assert saves == [(2, 0), (3, None), (4, 0), (6, 0), (7, 0)]
    assert [(h["step"], h["epoch"], h["dev_loss"]) for h in hook.history] == [(2, 1, 2.0), (4, 2, 1.0), (6, 3, 1.5),
                                                                            (7, 4, 1.2)]
    assert hook.best["step"] == 4 and hook.best["path"].endswith("step_4")
    assert (tmp_path / "checkpoints" / "best").read_text() == "step_4\n"
    assert prunes == [(1, ["step_2"]), (1, ["step_4"]), (1, ["step_4"]), (1, ["step_4"])]

    # resumed at step 5: the two epochs logged up to there are its history, step 4 its best, rewritten to
    # checkpoints/best (the kill may have fallen before it)
    (tmp_path / "checkpoints" / "best").unlink()
    again = EpochEvaluation(cfg, str(tmp_path), 0, "dev_loss", 2, None, log, "tok", start=5)
    assert [h["step"] for h in again.history] == [2, 4] and again.best["step"] == 4
    assert (tmp_path / "checkpoints" / "best").read_text() == "step_4\n"
    assert not epoch_evaluation.better("accuracy", 1.0, 2.0) and epoch_evaluation.better("dev_ppl", 1.0, 2.0)
