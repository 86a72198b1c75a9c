"""Where `mwb finetune story` starts without --checkpoint, and the scale it then takes: SmolLM2-135M with LoRA
when installed (32 stories, one epoch per part), else the tiny GPT's (200 stories, 2 generator epochs)."""
import pytest

from mwb.core.config import RunConfig
from mwb.tasks.api import setup
from mwb.tasks.story import train
from mwb.tasks.story.ranker import RankerConfig


@pytest.mark.parametrize("installed", [True, False])
def test_generative_start_is_the_real_gpt_only_when_installed_and_no_checkpoint(installed, monkeypatch):
    monkeypatch.setattr(setup, "named_installed", lambda name: installed and name == "smollm2-135m")
    start, real = setup.generative_start(None)
    assert (start.arch, start.named, real) == ("gpt", "smollm2-135m", installed)
    assert setup.generative_start("some/run")[1] is False  # a given checkpoint is never replaced


@pytest.mark.parametrize("installed", [True, False])
def test_story_scale_and_lora_follow_the_start(installed, monkeypatch, tmp_path):
    monkeypatch.setattr(setup, "named_installed", lambda name: installed)
    monkeypatch.setattr(train, "generative_start", setup.generative_start)
    seen = {}

    def fake_setup(what, arches, start, checkpoint, configure, tokenizer, say, defaults):
        seen["start"], seen["defaults"] = start, defaults(RunConfig())
        return setup.Setup("/ckpt", "/tok", RunConfig())

    monkeypatch.setattr(train, "finetune_setup", fake_setup)
    monkeypatch.setattr(train, "run_story", lambda scfg, cfg, nproc: scfg)
    opts = dict(train_stories=None, dev_stories=32, top_n=3, knowledge=True, delexicalize=False,
                keyword_epochs=None, generator_epochs=None)
    said = []
    scfg = train.finetune_story(None, str(tmp_path), None, lambda b: b, None, str(tmp_path / "o"), None,
                                said.append, RankerConfig(), **opts)
    want = train.REAL_SCALE if installed else train.TINY_SCALE
    assert (scfg.train_stories, scfg.generator_epochs, scfg.keyword_epochs) == \
        (want["train_stories"], want["generator_epochs"], want["keyword_epochs"])
    assert seen["defaults"].get("lora") == ({"rank": 8, "alpha": 16.0} if installed else None)
    assert seen["defaults"]["train"]["seq_length"] == (160 if installed else 256)
    assert seen["defaults"]["train"].get("global_batch_size") == (8 if installed else None)
    assert any(("LoRA" in m) is installed for m in said if m.startswith("mwb: story scale"))
    scfg = train.finetune_story(None, str(tmp_path), None, lambda b: b, None, str(tmp_path / "o"), None,
                                said.append, RankerConfig(), **{**opts, "train_stories": 7, "generator_epochs": 3})
    assert (scfg.train_stories, scfg.generator_epochs) == (7, 3)  # given values win over the scale


def test_story_eval_defaults_to_the_newest_story_run_and_sizes_its_stories(tmp_path, monkeypatch):
    from mwb.core.config import update
    from mwb.core.config import ConfigError
    from mwb.tasks.story import task as story_task
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="mwb finetune story"):
        story_task.StoryEval.default_checkpoint(say=lambda m: None)
    import os
    import time
    for i, name in enumerate(["finetune-story-20260101-000000", "finetune-story-20260102-000000"]):
        os.makedirs(tmp_path / "runs" / name)
        (tmp_path / "runs" / name / "story.json").write_text("{}")
        os.utime(tmp_path / "runs" / name, (time.time() + i, time.time() + i))
    os.makedirs(tmp_path / "runs" / "finetune-story-20260103-000000")  # unfinished: no story.json
    said = []
    assert story_task.StoryEval.default_checkpoint(say=said.append).endswith("finetune-story-20260102-000000")
    assert said and "newest story run" in said[0]
    smol = update(RunConfig(), {"model": {"num_layers": 30, "hidden_size": 576, "ffn_hidden_size": 1536}})
    tiny = update(RunConfig(), {"model": {"num_layers": 2, "hidden_size": 128, "ffn_hidden_size": 512}})
    assert story_task.generator_params(smol) == 30 * (4 * 576 ** 2 + 3 * 576 * 1536)
    assert (story_task.default_stories(smol), story_task.default_stories(tiny)) == (24, 100)
