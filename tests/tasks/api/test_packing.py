"""``mwb finetune TASK --pack``: the dev loss at ``--lr 0`` is the unpacked one; packed runs report the padding
they saved (OUT/packing.json, a log line) and every generative run logs its padding share and non-padding
tokens/s; --pack is refused where it does not apply."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.data.packing import PAD_DOCUMENT
from mwb.tasks.api import packing
from mwb.tasks.text.prompt_target import PromptTarget
from mwb.tasks.api.objectives import CLASSIFICATION
from tests.helpers.checkpoints import tiny_checkpoint


def _mwb(*args):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _sample(tokens, mask, capacity=8):
    n = len(tokens)
    return {"tokens": np.array(tokens + [0] * (capacity - n)), "loss_mask": np.array(mask + [0] * (capacity - n))}


def test_dev_rows_cover_the_unpacked_dev_samples_in_whole_global_batches():
    cfg = update(RunConfig(), {"train": {"seq_length": 7, "global_batch_size": 4, "micro_batch_size": 2}})
    train = [_sample([1, 2, 3], [0, 1, 1])] * 5
    dev = [_sample([1, 2, 3, 4], [0, 0, 1, 1]), _sample([5, 6], [0, 1]), _sample([7, 8, 9], [0, 1, 1])]
    lines = []
    rows, dev_rows = packing.pack_splits(train, dev, cfg, say=lambda m, **k: lines.append(m))
    assert len(rows) == 3  # 2 + 2 + 1 samples of 3 tokens in rows of 8
    # the unpacked dev loss covers samples 0..3 of the dev stream (3 samples, the first one twice), one batch
    assert len(dev_rows) == 4 and sum((r["doc_ids"] != PAD_DOCUMENT).sum() for r in dev_rows) == 4 + 2 + 3 + 4
    assert sum(int(r["loss_mask"].sum()) for r in dev_rows) == 2 + 1 + 2 + 2
    assert "5 training samples in 3 rows" in lines[0]


def test_pack_is_refused_where_it_does_not_apply():
    gpt = update(RunConfig(), {"model": {"arch": "gpt"}})

    class Encoder:
        name, objective = "rte", CLASSIFICATION
    with pytest.raises(ConfigError, match="generative"):
        packing.check(Encoder(), gpt)
    with pytest.raises(ConfigError, match="GPT samples"):
        packing.check(PromptTarget(), update(RunConfig(), {"model": {"arch": "t5"}}))
    with pytest.raises(ConfigError, match="context parallelism"):
        packing.check(PromptTarget(), update(gpt, {"parallel": {"cp": 2}}))


def test_dev_loss_at_lr_0_is_the_same_with_and_without_pack(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=2, hidden_size=64,
                           position_embedding="rope")
    common = ["prompt-target", "--checkpoint", ckpt, "--epochs", "1", "--lr", "0", "--seq-length", "64",
              "--global-batch-size", "8", "--micro-batch-size", "4", "--set", "logging.progress=false",
              "--set", "logging.tensorboard=false", "--max-tokens", "4"]
    plain, packed = str(tmp_path / "plain"), str(tmp_path / "packed")
    _mwb("finetune", *common, "--out", plain)
    log = _mwb("finetune", *common, "--pack", "--out", packed).stderr
    a = json.load(open(os.path.join(plain, "results.json")))["metrics"]["dev_loss"]
    b = json.load(open(os.path.join(packed, "results.json")))["metrics"]["dev_loss"]
    assert b == pytest.approx(a, rel=1e-6), (a, b)
    report = json.load(open(os.path.join(packed, "packing.json")))
    t = report["train"]
    assert t["samples"] == 64 and 8 <= t["rows"] < 32 and t["padding_packed"] < t["padding_unpacked"] - 0.3
    assert f"64 training samples in {t['rows']} rows" in log
    steps = [r for r in _records(packed) if "split" not in r]
    assert len(steps) == t["rows"] // 8  # an epoch is ⌊rows / global batch⌋ steps
    for out, share in ((plain, t["padding_unpacked"]), (packed, t["padding_packed"])):
        first = [r for r in _records(out) if "split" not in r][0]
        # each step's padding share is its rows' (a shuffled subset: near the set's share, not equal)
        assert 0.0 <= first["padding"] < 1.0 and abs(first["padding"] - share) < 0.25
        assert first["nonpad_tokens_per_s"] == pytest.approx(first["tokens_per_s"] * (1 - first["padding"]))
