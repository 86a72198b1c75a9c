"""``mwb finetune detox`` (SGEAT's domain-adaptive training) against its own start: at ``--lr 0`` typed alone (the
paper's constant schedule floors at 0, not at its 2e-5) the held-out perplexity after equals the one before, to
the bit, and the saved model is the start's."""
import json

import torch

from mwb.core.compose import full_state
from tests.helpers.checkpoints import TOKENIZER, tiny_checkpoint
from tests.helpers.cli import run_cli


def test_lr0_dapt_evaluates_exactly_as_its_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    from mwb.tasks.detox.loop import prepare
    start = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=32, num_layers=1, hidden_size=32,
                            num_attention_heads=2)
    rows = [{"text": f"The good people of the town {i} walk along the river in the morning."} for i in range(12)]
    prefix = prepare(rows, str(tmp_path / "data" / "filtered.jsonl"), TOKENIZER)
    out = str(tmp_path / "dapt")
    code, _, err = run_cli(["finetune", "detox", "--checkpoint", start, "--data", prefix, "--lr", "0", "--steps", "2",
                            "--global-batch-size", "4", "--micro-batch-size", "2", "--seq-length", "32",
                            "--eval-steps", "2", "--set", "logging.progress=false", "--out", out], capsys)
    assert code in (0, None), err
    res = json.load(open(tmp_path / "dapt" / "results.json"))
    m = res["metrics"]
    assert m["steps"] == 2 and m["loss"] == m["loss_before"] and m["ppl"] == m["ppl_before"] > 1
    a, b = full_state(start)[2], full_state(res["final_checkpoint"])[2]
    assert sorted(a) == sorted(b) and all(torch.equal(a[n], b[n]) for n in a)
