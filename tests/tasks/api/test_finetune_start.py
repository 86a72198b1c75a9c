"""A fine-tuning run against its own start: at ``--lr 0`` (typed alone) the weights stay the start's, so the run's
dev metrics must be exactly what ``mwb eval TASK`` gives the start, and its saved model the start's tensors.

Every ``mwb finetune TASK`` that continues an existing model without adding a head: prompt-target, chat, dialogue,
the story parts (keyword predictor, generator), the QA reader (extractive BERT), and LoRA at two ranks (the
adapters start at zero, so the merged model is the start). What this catches is anything between training and
evaluation that changes the model or how it is read: a saved config (sequence length, tokenizer, positions)
that differs from the start's, a tied head saved apart, an optimizer that moves weights at lr 0 (weight decay,
``optim.min_lr`` above the lr), LoRA scales applied twice.
"""
import json
import os

import pytest
import torch

from mwb.tasks.text.prompt_target import PromptTarget
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs

GPT = {"num_layers": 1, "hidden_size": 32, "num_attention_heads": 2}
ROC = "storyid,storytitle,sentence1,sentence2,sentence3,sentence4,sentence5\n" + "".join(
    f"s{i},T{i},{n} had a {p}.,The {p} ran away.,{n} looked for it.,{n} found it.,{n} was happy.\n"
    for i, (n, p) in enumerate([("Tom", "dog"), ("Ann", "cat"), ("Bob", "bird"), ("Eve", "fish")] * 3))
QA_FACTS = [("Zorbland", "The capital of Zorbland is Quillport, a harbour city."),
            ("Mount Vekra", "Mount Vekra was first climbed by Ada Lindqvist in the spring."),
            ("Orvik bridge", "The Orvik bridge was designed by Paulo Brenner for the railway."),
            ("Lake Tamsin", "Lake Tamsin is home to a rare silver trout.")]
QA_QUESTIONS = [("what is the capital of zorbland", ["Quillport"]), ("who first climbed mount vekra", ["Ada Lindqvist"]),
                ("who designed the orvik bridge", ["Paulo Brenner"]), ("what lives in lake tamsin",
                                                                       ["a rare silver trout"])] * 3


def _jsonl(d, rows_by_split):
    d.mkdir()
    for split, rows in rows_by_split.items():
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(d)


def _prompt_target(tmp):
    rows = PromptTarget().read(PromptTarget.default_data, "train")
    return _jsonl(tmp / "pt", {"train": rows[:8], "dev": rows[8:12]}), ["--max-tokens", "4"]


def _chat(tmp):
    conv = [{"messages": [{"role": "user", "content": f"What is {a} plus {a}?"},
                          {"role": "assistant", "content": f"It is {2 * a}."}]} for a in range(12)]
    return _jsonl(tmp / "chat", {"train": conv[:8], "dev": conv[8:]}), ["--max-tokens", "4"]


def _dialogue(tmp):
    from tests.tasks.dialogue.test_dialogue_task import chitchat_sample
    return chitchat_sample(tmp / "dialogue.json", 24), [
        "--actors", "--train-examples", "8", "--eval-examples", "4", "--held-out-actors", "0",
        "--min-conversations", "2", "--ranker-candidates", "0", "--max-tokens", "4"]


def _story_keywords(tmp):
    (tmp / "roc.csv").write_text(ROC)
    return str(tmp / "roc.csv"), ["--stories", "8", "--dev-stories", "2", "--max-tokens", "4"]


def _story_generator(tmp):
    from tests.tasks.story.test_story import _story_rows
    return _jsonl(tmp / "gen", {"train": _story_rows(8), "dev": _story_rows(4)}), ["--max-tokens", "4"]


def _qa_reader(tmp):
    ev = tmp / "evidence.tsv"
    ev.write_text("id\ttext\ttitle\n" + "".join(f"p{i}\t{t}\t{h}\n" for i, (h, t) in enumerate(QA_FACTS)))
    qs = tmp / "questions.tsv"
    qs.write_text("".join(f"{q}\t{json.dumps(a)}\n" for q, a in QA_QUESTIONS))
    return str(qs), ["--reader", "extractive", "--evidence", str(ev), "--top-k", "2", "--reader-length", "48"]


CASES = {  # name: (task, preset, make data, extra finetune flags)
    "prompt-target": ("prompt-target", "gpt-tiny", _prompt_target, []),
    "lora-rank-1": ("prompt-target", "gpt-tiny", _prompt_target, ["--lora", "1"]),
    "lora-rank-4": ("prompt-target", "gpt-tiny", _prompt_target, ["--lora", "4", "--lora-alpha", "16"]),
    "chat": ("chat", "gpt-tiny", _chat, []),
    "dialogue": ("dialogue", "gpt-tiny", _dialogue, []),
    "story-keywords": ("story-keywords", "gpt-tiny", _story_keywords, []),
    "story-generator": ("story-generator", "gpt-tiny", _story_generator, []),
    "qa-reader": ("qa-reader", "bert-tiny", _qa_reader, []),
}


def _tensors(path):
    from mwb.core.compose import full_state
    return full_state(path)[2]


# the keyword predictor's targets are RAKE keywords (rake-nltk, the data extra)
NEEDS = {"story-keywords": needs("rake_nltk")}


@pytest.mark.parametrize("case", [pytest.param(c, marks=NEEDS[c]) if c in NEEDS else c for c in CASES])
def test_lr0_run_evaluates_exactly_as_its_start(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    task, preset, make, extra = CASES[case]
    start = tiny_checkpoint(str(tmp_path / "start"), preset, seq=64, max_position_embeddings=64, **GPT)
    data, opts = make(tmp_path)
    run, ev = str(tmp_path / "run"), str(tmp_path / "eval")
    code, _, err = run_cli(["finetune", task, "--checkpoint", start, "--data", data, *opts, *extra, "--lr", "0",
                            "--epochs", "1", "--seq-length", "64", "--global-batch-size", "4",
                            "--micro-batch-size", "4", "--set", "logging.progress=false", "--out", run], capsys)
    assert code in (0, None), err
    code, _, err = run_cli(["eval", task, "--checkpoint", start, "--data", data, *opts, "--out", ev], capsys)
    assert code in (0, None), err
    got = json.load(open(os.path.join(run, "results.json")))
    want = json.load(open(os.path.join(ev, "results.json")))["metrics"]
    shared = [k for k, v in want.items() if isinstance(v, (int, float)) and k in got["metrics"]]
    assert shared, (sorted(want), sorted(got["metrics"]))
    assert {k: got["metrics"][k] for k in shared} == {k: want[k] for k in shared}
    from mwb.evaluation.predictions import read_predictions
    generated, expected = read_predictions(run), read_predictions(ev)
    assert generated == expected and len(expected) == want["count"]  # item by item: the same outputs

    a, b = _tensors(start), _tensors(got["best_checkpoint"])
    body = [n for n in a if n.startswith(("embed", "layers.", "final_norm"))]
    saved = {n: b.get(n, b.get("encoder." + n)) for n in body}  # a reader saves its BERT as encoder.*
    assert len(body) > 10 and all(v is not None for v in saved.values()), sorted(b)
    for n in body:  # the run's model is the start's, tensor for tensor
        assert torch.equal(a[n].float(), saved[n].float()), n


def test_min_lr_above_lr_is_one_line_naming_both_and_the_fix(tmp_path, capsys):
    """Megatron asserts max_lr >= min_lr: a floor above the peak would train at the floor (``--lr 0`` at 2e-6)."""
    start = tiny_checkpoint(str(tmp_path / "start"), "gpt-tiny", seq=64, max_position_embeddings=64, **GPT)
    data, opts = _prompt_target(tmp_path)
    code, _, err = run_cli(["finetune", "prompt-target", "--checkpoint", start, "--data", data, "--lr", "0",
                            "--set", "optim.min_lr=2e-6", "--out", str(tmp_path / "run")], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "optim.min_lr 2e-06 is above optim.lr 0" in lines[0] and "--set optim.min_lr=0" in lines[0]
