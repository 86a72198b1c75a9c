"""``mwb eval`` / ``mwb generate`` end to end (in process) on a checkpoint written through the checkpoint
module, and the clear errors for a missing checkpoint or an unknown task option."""
import json
import os

import pytest

from tests.helpers.cli import run_cli
from mwb.evaluation.evaluator import evaluate
from mwb.tasks.api.registry import get_task

from .eval_helpers import save_checkpoint


_run = run_cli


@pytest.fixture(scope="module")
def checkpoint(eval_model, eval_tokenizer, eval_tokenizer_path, tmp_path_factory):
    return save_checkpoint(eval_model, eval_tokenizer.vocab_size, eval_tokenizer_path,
                           str(tmp_path_factory.mktemp("ck") / "step_1"), seq_length=64)


def test_list_and_missing_checkpoint(capsys, tmp_path, monkeypatch):
    code, out, _ = _run(["eval", "--list"], capsys)
    assert code == 0 and "lambada" in out and "wikitext" in out and "--strict" in out
    monkeypatch.chdir(tmp_path)  # no runs/pretrain-gpt-* here
    code, _, err = _run(["eval", "lambada"], capsys)
    assert code == 2 and "--checkpoint" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(["eval", "lambada", "--checkpoint", "x", "--bogus"], capsys)
    assert code == 2 and "no option --bogus" in err


def test_eval_lambada_and_wikitext(checkpoint, eval_lm, capsys, tmp_path):
    out_dir = str(tmp_path / "lam")
    code, out, err = _run(["eval", "lambada", "--checkpoint", checkpoint, "--out", out_dir, "--strict"], capsys)
    assert code == 0, err
    res = json.load(open(os.path.join(out_dir, "results.json")))
    want = evaluate(get_task("lambada")(strict=True, seq_length=64), eval_lm)["metrics"]
    assert res["task"] == "lambada" and res["metrics"]["accuracy"] == want["accuracy"]
    assert res["metrics"]["target_perplexity"] == pytest.approx(want["target_perplexity"], rel=1e-5)
    assert res["torch"] and res["mwb"] and res["config"]["model"]["hidden_size"] == 64
    assert res["checkpoint"] == os.path.abspath(checkpoint) and "results.json" in out
    code, out, err = _run(["eval", "wikitext", "--checkpoint", checkpoint, "--out", str(tmp_path / "wt"),
                           "--overlap", "16", "--batch-size", "4"], capsys)
    assert code == 0, err
    res = json.load(open(tmp_path / "wt" / "results.json"))
    want = evaluate(get_task("wikitext")(seq_length=64, overlap=16), eval_lm)["metrics"]
    assert res["metrics"]["perplexity"] == pytest.approx(want["perplexity"], rel=1e-6)
    assert res["task_options"]["seq_length"] == 64  # the checkpoint's training length by default
    assert "wikitext adjusted_perplexity" in out


def test_generate_cli(checkpoint, eval_lm, capsys, monkeypatch):
    import mwb.evaluation.lm as lm_module
    from mwb.evaluation.generation import SamplingParams, generate
    packed = []  # models whose linears were packed: by default on CPU, not with --no-pack-weights
    real_pack = lm_module.pack_linears
    monkeypatch.setattr(lm_module, "pack_linears", lambda model: packed.append(model) or real_pack(model))
    code, out, err = _run(["generate", "--checkpoint", checkpoint, "--prompt", "The baker", "--prompt", "Tom",
                           "--max-tokens", "5", "--temperature", "0", "--json"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.strip().splitlines()]
    want = generate(eval_lm, ["The baker", "Tom"], SamplingParams(max_tokens=5, temperature=0))
    assert [r["tokens"] for r in rows] == [g.tokens for g in want]
    assert [lp for r in rows for lp in r["logprobs"]] == pytest.approx([lp for g in want for lp in g.logprobs],
                                                                       abs=1e-4)
    assert len(packed) == 1
    code, out, err = _run(["generate", "--checkpoint", checkpoint, "--prompt", "The baker", "--prompt", "Tom",
                           "--max-tokens", "5", "--temperature", "0", "--json", "--no-pack-weights"], capsys)
    assert code == 0, err
    assert [json.loads(line)["tokens"] for line in out.strip().splitlines()] == [g.tokens for g in want]
    assert len(packed) == 1
    code, out, err = _run(["generate", "--checkpoint", checkpoint, "--prompt", "The baker", "--prompt", "Tom",
                           "--max-tokens", "5", "--seed", "3", "--n", "2", "--batch-size", "3", "--json"], capsys)
    assert code == 0, err
    want = generate(eval_lm, ["The baker", "Tom"], SamplingParams(max_tokens=5, seed=3, n=2))
    assert [json.loads(line)["tokens"] for line in out.strip().splitlines()] == [g.tokens for g in want]


def test_eval_hugging_face_directory(eval_model, eval_tokenizer, eval_tokenizer_path, eval_lm, capsys, tmp_path):
    """--checkpoint may be a Hugging Face GPT-2 directory (converted on the fly by mwb.core.convert)."""
    pytest.importorskip("mwb.core.convert")
    import shutil

    from .eval_helpers import to_hf
    hf_dir = tmp_path / "hf"
    to_hf(eval_model, eval_tokenizer.vocab_size).save_pretrained(hf_dir)
    shutil.copy(eval_tokenizer_path, hf_dir / "tokenizer.json")
    code, out, err = _run(["eval", "lambada", "--checkpoint", str(hf_dir), "--out", str(tmp_path / "o")], capsys)
    assert code == 0, err
    res = json.load(open(tmp_path / "o" / "results.json"))
    want = evaluate(get_task("lambada")(), eval_lm)["metrics"]
    assert res["metrics"]["accuracy"] == want["accuracy"] and 0 < want["accuracy"] < 1
    assert res["metrics"]["target_perplexity"] == pytest.approx(want["target_perplexity"], rel=1e-5)
    assert res["task_options"]["seq_length"] == 256  # a Hugging Face model's full context


def test_default_checkpoint_is_newest_gpt_run(checkpoint, capsys, tmp_path, monkeypatch):
    import shutil
    ck = tmp_path / "runs" / "pretrain-gpt-20260101-000000" / "checkpoints"
    shutil.copytree(checkpoint, ck / "step_1")
    (ck / "latest").write_text("step_1\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["generate", "--prompt", "The", "--max-tokens", "2", "--temperature", "0"], capsys)
    assert code == 0, err
    assert "using the newest GPT run runs/pretrain-gpt-20260101-000000" in err
