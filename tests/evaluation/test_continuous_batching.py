"""The continuous batcher and its preallocated KV cache: rows with different prompts and sampling settings,
joining a 3-row batch as others leave, prompts prefilled in 7-token chunks, ``n`` samples sharing one
prefill — each gets what the no-cache reference gives it alone; the cache's row moves; the engine's
blocking API, its KV-token limit; ``mwb serve`` with its engine flags."""
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest
import torch

from mwb.core.models.kv_cache import PreallocatedKVCache
from mwb.evaluation.batcher import ContinuousBatcher
from mwb.evaluation.engine import EngineConfig, ServingEngine
from mwb.evaluation.generation import SamplingParams, generate, prompt_rows
from tests.helpers.checkpoints import tiny_checkpoint

from .serving_helpers import one_thread  # noqa: F401  (autouse: one intra-op thread)
from .test_eval_batched_generation import assert_same, rope_lm, sixteen_prompts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = [SamplingParams(max_tokens=9, temperature=0, stop_at_eod=False),
            SamplingParams(max_tokens=12, temperature=0.9, top_k=30, seed=4, n=3, stop_at_eod=False),
            SamplingParams(max_tokens=7, temperature=1.2, top_p=0.8, seed=5, top_logprobs=2),
            SamplingParams(max_tokens=10, temperature=0, no_repeat_ngram_size=2, stop=("e",)),
            SamplingParams(max_tokens=0, temperature=0)]


@pytest.mark.parametrize("which", ["learned", "rope"])
def test_mixed_rows_in_small_batches_equal_the_reference_alone(eval_lm, eval_tokenizer, which):
    lm = eval_lm if which == "learned" else rope_lm(eval_tokenizer)
    prompts = sixteen_prompts(eval_tokenizer)[1::2]  # 4 … 40 tokens, and the empty prompt
    jobs = [(p, SETTINGS[i % len(SETTINGS)], i % 4 == 0) for i, p in enumerate(prompts)]
    batcher = ContinuousBatcher(lm, max_rows=3, prefill_tokens=7)
    peak, results = 0, []
    for prompt, params, echo in jobs:
        groups = prompt_rows(lm, [prompt], params)
        batcher.add(groups[0], params, echo=echo)
        results.append([r.out for r in groups[0]])
    while not batcher.idle:
        batcher.step()
        peak = max(peak, batcher.rows_in_use())
        assert batcher.cache.rows <= 3
    assert peak == 3
    for (prompt, params, echo), got in zip(jobs, results):
        ref = SamplingParams(**{**params.__dict__, "use_cache": False})
        want = generate(lm, [prompt], ref, echo_logprobs=echo)
        assert_same(got, want)
        for g, w in zip(got, want):
            assert [sorted(d) for d in g.top_logprobs] == [sorted(d) for d in w.top_logprobs]
            if echo:
                assert g.prompt_logprobs[0] is None and w.prompt_logprobs[0] is None
                assert g.prompt_logprobs[1:] == pytest.approx(w.prompt_logprobs[1:], abs=1e-4)


def test_cache_rows_move_swap_and_reorder():
    cache = PreallocatedKVCache(max_rows=4)
    k = torch.arange(3 * 2 * 5 * 4, dtype=torch.float32).view(3, 2, 5, 4)  # 3 rows, 2 kv heads, 5 new, d = 4
    cache.begin(0, [5, 3, 1], 5)
    keys, _, mask = cache.update(0, k, -k)
    cache.commit()
    assert cache.lengths.tolist() == [5, 3, 1] and keys.shape == (3, 2, 5, 4)
    # left-padded: row 1's 3 tokens are columns 2-4, written at positions 0-2; its queries see up to themselves
    assert torch.equal(cache.k[0][1, :, :3], k[1, :, 2:]) and mask[1, 0, 2].tolist() == [True] + [False] * 4
    assert torch.equal(mask[0, 0], torch.ones(5, 5, dtype=torch.bool).tril())  # causal within the pass
    row2 = cache.k[0][2, :, :1].clone()
    cache.move(2, 0)
    assert cache.lengths[0] == 1 and torch.equal(cache.k[0][0, :, :1], row2)
    cache.swap(0, 1)
    assert cache.lengths.tolist()[:2] == [3, 1] and torch.equal(cache.k[0][0, :, :3], k[1, :, 2:])
    cache.reorder(torch.tensor([1, 1, 0, 0]))  # beam search: rows copied, the cache grows to 4 rows
    assert cache.lengths.tolist() == [1, 1, 3, 3] and torch.equal(cache.k[0][3, :, :3], k[1, :, 2:])
    with pytest.raises(ValueError, match="at most 4 rows"):
        cache.begin(0, [1] * 5, 1)


def test_engine_generate_streams_and_checks_its_kv_limit(eval_lm):
    engine = ServingEngine(eval_lm, EngineConfig(batch_rows=2, kv_tokens=40))
    try:
        params = SamplingParams(max_tokens=8, temperature=0.8, seed=2, n=3)
        seen = []
        got = engine.generate(["The baker", "Tom"], params, on_token=lambda i, toks: seen.append((i, len(toks))))
        assert_same(got, generate(eval_lm, ["The baker", "Tom"], params))
        assert sorted(set(i for i, _ in seen)) == list(range(6)) and max(n for _, n in seen) == 8
        cache = engine.batcher.cache
        # two rows of at most 8 + prompt (< 20) tokens: growing would double to 64 tokens a row, past the
        # 40-token budget (--kv-tokens), so the storage is cut to the budget: 2 rows × 40 // 2 tokens
        assert (cache.rows, cache.capacity) == (2, 20)
        with pytest.raises(ValueError, match="need 48 KV positions; this server holds 40"):
            engine.submit([[5] * 40], SamplingParams(max_tokens=8))
    finally:
        engine.close()
    assert engine.stats()["completed"] == 1


@pytest.fixture(scope="module")
def served_ckpt(tmp_path_factory):
    return tiny_checkpoint(str(tmp_path_factory.mktemp("serve") / "gpt"), "gpt-tiny", num_layers=2, hidden_size=32,
                           num_attention_heads=2, ffn_hidden_size=64)


def _start_serve(ckpt: str, *flags: str):
    """``mwb serve`` in a subprocess on a free port: (process, base url, its first stderr line)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "mwb", "serve", "--checkpoint", ckpt, "--port", "0", "--quiet",
                             *flags], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"on (http://\S+/v1)", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"mwb serve did not start: {line}{proc.stderr.read()}")
    return proc, match.group(1), line


def _complete(url: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _stop(proc) -> str:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    return proc.stderr.read()


def test_serve_cli_takes_the_engine_flags(served_ckpt):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    bad = subprocess.run([sys.executable, "-m", "mwb", "serve", "--checkpoint", served_ckpt, "--batch-rows", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--batch-rows" in bad.stderr
    proc, url, line = _start_serve(served_ckpt, "--batch-rows", "2", "--max-queue", "3", "--kv-tokens", "512",
                                   "--prefill-tokens", "8")
    try:
        assert "up to 2 rows batched, 3 queued" in line
        out = _complete(url, "Once upon a time", 4)
        assert out["usage"]["completion_tokens"] <= 4 and out["choices"][0]["finish_reason"] in ("length", "stop")
    finally:
        assert "stopped" in _stop(proc)


@pytest.mark.multiprocess
def test_serve_cli_over_two_tensor_parallel_ranks(served_ckpt):
    from mwb.evaluation.loading import load_language_model

    _, lm = load_language_model(served_ckpt, device=torch.device("cpu"))
    want = generate(lm, ["Once upon a time", "The river"], SamplingParams(max_tokens=6, temperature=0))
    proc, url, line = _start_serve(served_ckpt, "--nproc", "2")
    try:
        assert "over 2 tensor-parallel ranks" in line
        got = [_complete(url, p, 6)["choices"][0]["text"] for p in ("Once upon a time", "The river")]
        assert got == [g.text for g in want]
    finally:
        assert "stopped" in _stop(proc)  # rank 0 closes, the other rank follows: exit status 0
