"""Counts, probabilities, ranges and choices are checked at the edge: a bad value is a usage error (exit 2)
naming the option, raised while the command line is parsed — before any model, data or run directory.

Click options are declared with ``click.IntRange``/``FloatRange``/``Choice`` and run through click's
``CliRunner``; task options (``mwb eval TASK --shots``) are declared with ``Option(low=, high=, choices=)``
and go through ``mwb``'s own entry point, which turns their ConfigError into exit 2.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from mwb.cli.main import cli
from tests.helpers.cli import run_cli


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """Anything that would load a model, read data or start a run fails the test loudly."""
    def forbidden(*a, **k):
        raise AssertionError("work started before the bad option was refused")
    import mwb.evaluation.loading
    import mwb.tasks.api.evaluate
    import mwb.tasks.api.setup
    for mod, name in ((mwb.tasks.api.evaluate, "run_eval"), (mwb.tasks.api.setup, "finetune_task"),
                      (mwb.tasks.api.setup, "eval_checkpoint"), (mwb.evaluation.loading, "load_language_model")):
        monkeypatch.setattr(mod, name, forbidden)


CLICK_CASES = [  # (argv, the option the message must name)
    (["eval", "lambada", "--batch-size", "0"], "--batch-size"),
    (["eval", "wikitext", "--limit", "-3"], "--limit"),
    (["eval", "race", "--nproc", "0"], "--nproc"),
    (["finetune", "race", "--epochs", "0"], "--epochs"),
    (["finetune", "race", "--global-batch-size", "0"], "--global-batch-size"),
    (["finetune", "race", "--micro-batch-size", "-1"], "--micro-batch-size"),
    (["finetune", "race", "--lora-dropout", "1"], "--lora-dropout"),
    (["finetune", "race", "--precision", "fp12"], "--precision"),
    (["finetune", "prompt-target", "--lr", "-0.1"], "--lr"),
    (["finetune", "prompt-target", "--seq-length", "0"], "--seq-length"),
    (["finetune", "prompt-target", "--keep-last", "-1"], "--keep-last"),
    (["finetune", "e2e-qa", "--top-k", "0"], "--top-k"),
    (["finetune", "dpr", "--hard-negatives", "-1"], "--hard-negatives"),
    (["finetune", "story", "--generator-epochs", "0"], "--generator-epochs"),
    (["pretrain", "gpt", "--tp", "0"], "--tp"),
    (["pretrain", "gpt", "--steps", "0"], "--steps"),
    (["detox", "--keep", "0"], "--keep"),
    (["detox", "--keep", "1.5"], "--keep"),
    (["detox", "--samples", "0"], "--samples"),
    (["detox", "filter", "--keep", "-0.5"], "--keep"),
    (["detox", "generate", "--num-samples", "0"], "--num-samples"),
    (["qa", "synthesize", "--filter-threshold", "2"], "--filter-threshold"),
    (["qa", "synthesize", "--qg-shots", "-1"], "--qg-shots"),
    (["qa", "evaluate-reader", "--top-k", "0"], "--top-k"),
    (["repro", "megatron_cntrl", "--seeds", "0"], "--seeds"),
    (["score", "x.jsonl", "--batch-size", "0"], "--batch-size"),
    (["compare", "a", "b", "--metric", "accuracy", "--resamples", "0"], "--resamples"),
    (["generate", "--top-k", "-1"], "--top-k"),
    (["generate", "--top-p", "0"], "--top-p"),
    (["generate", "story", "--top-k", "-2"], "--top-k"),
]


@pytest.mark.parametrize("argv,option", CLICK_CASES, ids=[" ".join(a) for a, _ in CLICK_CASES])
def test_click_option_out_of_range_is_usage_error(argv, option):
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert option in res.output and "Invalid value" in res.output


TASK_CASES = [
    (["eval", "bias", "--shots", "-1"], "--shots", ">= 0"),
    (["eval", "bias", "--selection", "closest"], "--selection", "random, balanced, nearest"),
    (["eval", "toxicity", "--samples", "0"], "--samples", ">= 1"),
    (["eval", "toxicity", "--top-p", "1.5"], "--top-p", "in [0.0, 1.0]"),
    (["eval", "squad", "--version", "3.0"], "--version", "1.1, 2.0"),
    (["eval", "qa-reader", "--reader", "bart"], "--reader", "extractive, fid, causal"),
    (["eval", "dialogue", "--held-out-actors", "2"], "--held-out-actors", "in [0.0, 1.0]"),
    (["finetune", "summarize", "--num-beams", "0"], "--num-beams", ">= 1"),
    (["finetune", "glue", "--task", "wnli"], "--task", "mnli"),
]


@pytest.mark.parametrize("argv,option,rule", TASK_CASES, ids=[" ".join(a) for a, _, _ in TASK_CASES])
def test_task_option_out_of_range_is_usage_error(argv, option, rule, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (code, out, err)
    line = err.strip()
    assert "\n" not in line and option in line and rule in line, line
