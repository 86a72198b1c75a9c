"""Generative fine-tuning (GPT: prompt masked out of the loss; T5: source → target) on the shared trainer."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.api.epoch_evaluation import better
from mwb.tasks.api.generative_objective import gpt_sample, t5_sample
from mwb.tasks.text.prompt_target import PromptTarget, to_pair
from tests.helpers.checkpoints import TOKENIZER, tiny_checkpoint
from tests.helpers.needs import needs


def test_gpt_sample_masks_the_prompt_and_keeps_the_target():
    s = gpt_sample([5, 6, 7], [8, 9], seq_length=8, eod=0)
    assert s["tokens"].tolist() == [5, 6, 7, 8, 9, 0, 0, 0, 0]
    # loss_mask[i] = 1: token i is a label (predicted from position i-1): the target and the closing eod
    assert s["loss_mask"].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0]
    cut = gpt_sample(list(range(10, 30)), [8, 9], seq_length=6, eod=0)  # the prompt loses its beginning
    assert cut["tokens"].tolist() == [26, 27, 28, 29, 8, 9, 0] and cut["loss_mask"].tolist() == [0] * 4 + [1] * 3
    empty = gpt_sample([], [8], seq_length=4, eod=0)
    assert empty["tokens"].tolist()[:3] == [0, 8, 0] and empty["loss_mask"].tolist()[:3] == [0, 1, 1]


def test_t5_sample_layout():
    tok = load_tokenizer(TOKENIZER)
    s = t5_sample([5, 6], [8, 9], enc_length=4, dec_length=8, tok=tok)
    eos = tok.eos if tok.eos is not None else tok.eod
    assert s["enc_tokens"].tolist()[:3] == [5, 6, eos] and s["enc_padding_mask"].tolist() == [1, 1, 1, 0]
    assert s["labels"].tolist()[:3] == [8, 9, eos] and s["labels"][3] == -1
    assert s["dec_tokens"].tolist()[1:3] == [8, 9] and s["loss_mask"].sum() == 3


def test_prompt_target_reads_every_layout(tmp_path):
    assert to_pair({"instruction": "Add.", "input": "1 2", "output": "3"}, "x") == \
        {"prompt": "Add.\n\n1 2", "target": "3"}
    assert to_pair({"source": "a", "target": "b"}, "x") == {"prompt": "a", "target": "b"}
    with pytest.raises(Exception, match="prompt/target"):
        to_pair({"question": "a"}, "x")
    (tmp_path / "train.csv").write_text("input,output\nhello,world\n")
    assert PromptTarget().read(str(tmp_path), "train") == [{"prompt": "hello", "target": "world"}]
    rows = PromptTarget().read(PromptTarget.default_data, "train")
    assert len(rows) == 64 and all(r["prompt"].endswith("Reply:") for r in rows)


def test_best_checkpoint_direction():
    assert better("dev_loss", 1.0, 2.0) and not better("dev_loss", 2.0, 1.0)
    assert better("accuracy", 0.3, 0.2) and not better("f1", 0.1, 0.2) and better("exact_match", 0.0, None)


def _mwb(*args):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if "split" not in r]


def _small_set(tmp_path, n: int = 16) -> str:
    rows = PromptTarget().read(PromptTarget.default_data, "train")[:n]
    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "dev"):
        with open(d / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(d)


@pytest.mark.multiprocess
def test_gpt_finetune_learns_and_layouts_match(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=2, hidden_size=64)
    data = _small_set(tmp_path, 8)
    common = ["prompt-target", "--checkpoint", ckpt, "--data", data, "--global-batch-size", "8",
              "--micro-batch-size", "4", "--set", "logging.progress=false"]
    before = str(tmp_path / "before")
    _mwb("eval", "prompt-target", "--checkpoint", ckpt, "--data", data, "--split", "train", "--out", before)
    em0 = json.load(open(os.path.join(before, "results.json")))["metrics"]["exact_match"]
    # The cosine schedule's length fixed at the long run's 40 steps, so that the short runs below take the
    # same first steps as it does.
    sched = ["--lr", "5e-3", "--set", "optim.decay_steps=40"]
    one = str(tmp_path / "one")
    _mwb("finetune", *common, *sched, "--epochs", "40", "--out", one)
    losses = _losses(one)
    assert np.mean(losses[-4:]) < 0.3 * np.mean(losses[:2])  # the target-token loss falls
    res = json.load(open(os.path.join(one, "results.json")))
    assert res["metrics"]["exact_match"] >= em0 + 0.5, res["metrics"]  # greedy generations now match
    # TP2 and PP2 against one process: the same first 4 steps as the long one-process run (their generations,
    # not compared here, kept to 1 token)
    short = [*common, *sched, "--epochs", "4", "--max-tokens", "1"]
    for layout in (["--tp", "2"], ["--pp", "2"]):
        out = str(tmp_path / ("l" + layout[0]))
        _mwb("finetune", *short, "--out", out, "--nproc", "2", *layout)
        a, b = losses[:4], _losses(out)
        assert len(losses) == 40 and len(b) == 4
        assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5, (layout, a, b)


@pytest.mark.multiprocess
def test_t5_finetune_tp2_matches_one_process(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "t5"), "t5-tiny", seq=64, num_layers=1, num_decoder_layers=1,
                           hidden_size=64)
    data = _small_set(tmp_path, 8)
    common = ["prompt-target", "--checkpoint", ckpt, "--data", data, "--global-batch-size", "4",
              "--micro-batch-size", "2", "--epochs", "2", "--lr", "1e-3", "--set", "logging.progress=false"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _mwb("finetune", *common, "--out", one)
    _mwb("finetune", *common, "--out", two, "--nproc", "2", "--tp", "2")
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 4 and a[-1] < a[0]
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5
    res = json.load(open(os.path.join(one, "results.json")))
    from mwb.evaluation.metrics import squad_exact_match, squad_f1
    from mwb.evaluation.predictions import read_predictions
    recs = read_predictions(one)  # the best checkpoint's greedy generations, one record per dev item
    assert res["metrics"]["exact_match"] == pytest.approx(
        np.mean([squad_exact_match(r["prediction"], r["gold"]) for r in recs]), abs=1e-12)
    assert res["metrics"]["f1"] == pytest.approx(np.mean([squad_f1(r["prediction"], r["gold"]) for r in recs]),
                                                 abs=1e-12)
    best = min(res["epochs"], key=lambda e: e["dev_loss"])  # the best epoch is the lowest dev loss
    assert res["metrics"]["dev_loss"] == best["dev_loss"] and res["best_checkpoint"].endswith(f"step_{best['step']}")
    assert res["empty_outputs"] == sum(not r["prediction"].strip() for r in recs)
    assert [r["empty"] for r in recs] == [not r["prediction"].strip() for r in recs]


@pytest.mark.multiprocess
@needs("gguf", models=["smollm2-135m"])
def test_smollm2_step_tp3_equals_one_process(tmp_path):
    """SmolLM2-135M has 9 heads and 3 KV heads: TP 3 is its one tensor-parallel layout on 3 ranks."""
    data = _small_set(tmp_path, 1)  # one example: one step
    common = ["prompt-target", "--checkpoint", "smollm2-135m", "--data", data, "--global-batch-size", "1",
              "--micro-batch-size", "1", "--epochs", "1", "--seq-length", "32", "--lr", "1e-4",
              "--set", "logging.progress=false", "--set", "model.dropout=0"]
    one, three = str(tmp_path / "one"), str(tmp_path / "three")
    _mwb("finetune", *common, "--out", one)
    a = _losses(one)
    shutil.rmtree(one)  # each run's checkpoint (weights + Adam moments) is 2 GB: one on disk at a time
    _mwb("finetune", *common, "--out", three, "--nproc", "3", "--tp", "3")
    b = _losses(three)
    assert len(a) == len(b) == 1 and abs(a[0] - b[0]) / abs(a[0]) < 1e-5, (a, b)
