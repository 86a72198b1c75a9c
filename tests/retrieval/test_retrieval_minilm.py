"""Retrievers start from a plain Hugging Face ``BertModel`` (all-MiniLM-L6-v2, no masked-LM head): ``mwb
finetune dpr --checkpoint`` takes its directory, and its ``mwb convert`` output (an mwb BERT marked
``bert_lm_head: false``), and initialises both towers from it."""
import json
import os

import pytest

from mwb.core.convert import convert
from tests.helpers.cli import run_cli
from tests.helpers.minilm import minilm_dir
from tests.helpers.needs import needs

from .retrieval_helpers import write_dpr_json

SMALL = ["--seq-length", "32", "--query-length", "12", "--micro-batch-size", "4", "--global-batch-size", "4",
         "--eval-interval", "0", "--steps", "2"]


@needs(models=["minilm-l6"])
@pytest.mark.parametrize("form", ["hf", "converted"])
def test_finetune_dpr_starts_from_minilm(tmp_path, capsys, form, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = minilm_dir()
    if form == "converted":
        _, source, _ = convert(source, str(tmp_path / "mwb"))
    data = write_dpr_json(str(tmp_path / "train.json"), 12, seed=4)
    out = str(tmp_path / "dpr")
    code, _, err = run_cli(["finetune", "dpr", "--checkpoint", source, "--data", data, "--out", out, *SMALL], capsys)
    assert code == 0, err
    assert "initialised from" in err and ("MiniLM" in err or "sentence-transformers" in err or source in err)
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["task"] == "dpr" and os.path.isdir(os.path.join(out, "checkpoints", "step_2"))
