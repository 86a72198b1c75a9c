"""Two gloo ranks (one spawn for all checks): TP = 2 sampling gives the single-process tokens and
log-probabilities on both ranks (seeded, and unseeded through the broadcast seed), and evaluation sharded
over DP = 2 gives the single-process metrics."""
import pytest

from mwb.evaluation.evaluator import evaluate
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.lm import LanguageModel
from mwb.tasks.api.registry import get_task
from tests.helpers.distributed import run_ranks

from .eval_helpers import PROMPTS, dist_worker, tiny_gpt


@pytest.mark.multiprocess
def test_tensor_and_data_parallel_evaluation(eval_tokenizer, eval_tokenizer_path):
    ranks = run_ranks(dist_worker, 2, eval_tokenizer_path, timeout_s=300)
    lm = LanguageModel(tiny_gpt(eval_tokenizer.vocab_size), eval_tokenizer)
    want = generate(lm, PROMPTS, SamplingParams(max_tokens=12, temperature=0.9, top_k=30, seed=4))
    for r in ranks:
        for (tokens, logprobs), g in zip(r["tp_sampled"], want):
            assert tokens == g.tokens
            assert logprobs == pytest.approx(g.logprobs, abs=1e-4)
    assert ranks[0]["tp_unseeded"] == ranks[1]["tp_unseeded"]
    wiki32 = evaluate(get_task("wikitext")(seq_length=64, overlap=32), lm)["metrics"]
    assert ranks[0]["tp_wiki"]["perplexity"] == pytest.approx(wiki32["perplexity"], rel=1e-5)

    lam = evaluate(get_task("lambada")(batch_size=3), lm, records=True)
    wiki = evaluate(get_task("wikitext")(seq_length=64, overlap=16, batch_size=4), lm, records=True)
    for r in ranks:
        assert r["dp_lambada"]["dp_size"] == 2 and r["dp_lambada"]["num_items"] == lam["num_items"]
        assert r["dp_lambada"]["metrics"]["accuracy"] == lam["metrics"]["accuracy"]
        assert r["dp_lambada"]["metrics"]["target_perplexity"] == pytest.approx(
            lam["metrics"]["target_perplexity"], rel=1e-6)
        assert r["dp_wiki"]["metrics"]["perplexity"] == pytest.approx(wiki["metrics"]["perplexity"], rel=1e-6)
    assert ranks[0]["dp_wiki"]["metrics"] == ranks[1]["dp_wiki"]["metrics"]
    for name, one in (("dp_lambada", lam), ("dp_wiki", wiki)):  # per-item records: item order, any number of ranks
        got = ranks[0][name]["records"]
        assert [r["id"] for r in got] == [r["id"] for r in one["records"]] and len(got) == one["num_items"]
        assert [r["prediction"] for r in got] == [r["prediction"] for r in one["records"]]
