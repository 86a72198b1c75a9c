"""The shared per-rank driver pieces: the closing banner's two columns, resume announcements, the run tree."""
import dataclasses
import os

import pytest

from mwb.core.config import RunConfig, update
from mwb.core.training import driver


def lines_said():
    said = []
    return said, lambda *a, **k: said.append((" ".join(map(str, a)), k.get("file")))


def test_banner_lines_and_left_out_rows(tmp_path):
    said, say = lines_said()
    out = str(tmp_path / "run")
    driver.banner(say, out, (("tensorboard", None), ("checkpoint", "/c/step_3"), ("results", "/r.json")))
    assert [s for s, _ in said] == [f"mwb: run directory   {os.path.abspath(out)}",
                                    f"mwb: metrics         {out}/metrics.jsonl",
                                    "mwb: checkpoint      /c/step_3",
                                    "mwb: results         /r.json"]


def test_resume_latest_without_a_checkpoint(tmp_path):
    said, say = lines_said()
    root = str(tmp_path / "checkpoints")
    assert driver.resume_latest(None, root, resume=False, say=say, announce_missing=True) == (0, None)
    assert said == []  # not asked to resume: nothing said
    assert driver.resume_latest(None, root, resume=True, say=say, announce_missing=True) == (0, None)
    import sys
    assert said == [(f"mwb: no checkpoint under {root}; starting from step 0", sys.stderr)]
    said.clear()
    assert driver.resume_latest(None, root, resume=True, say=say) == (0, None)
    assert said == []


def test_run_tree_sets_the_run_directory_and_round_trips():
    cfg = update(RunConfig(), {"train": {"steps": 7}})
    tree = driver.run_tree(cfg, "/tmp/x")
    assert update(RunConfig(), tree) == dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, out="/tmp/x"))


def test_no_pipeline_names_the_training():
    from mwb.core.parallel.dims import LayoutError

    class Dims:
        pp = 2
    with pytest.raises(LayoutError, match="^bi-encoder training does not support pipeline parallelism; use --pp 1$"):
        driver.no_pipeline(Dims, "bi-encoder training")
    Dims.pp = 1
    driver.no_pipeline(Dims, "bi-encoder training")
