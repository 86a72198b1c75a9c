"""The serving engine (continuous batching): 16 concurrent requests — different prompts, lengths, sampling
settings, stop strings, logprobs, echo, streamed and not, on both endpoints — each get exactly what they get
alone, in one process and under TP = 2; a full queue is a 429; a client that disconnects frees its row."""
import json
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from mwb.evaluation.engine import EngineConfig
from mwb.evaluation.lm import LanguageModel
from tests.helpers.distributed import run_ranks

from .eval_helpers import tiny_gpt
from .serving_helpers import (all_at_once, assert_same_answers, one_at_a_time, one_thread, post, serve,  # noqa: F401
                              sixteen_requests, wait_until)

ROPE = dict(position_embedding="rope", normalization="rmsnorm", activation="swiglu", init_std=0.2)
# 8 rows for 18 completions: rows join as others leave; 48-token prefill passes: long prompts are chunked
CONFIG = EngineConfig(batch_rows=8, prefill_tokens=48, kv_tokens=4096)


def rope_lm(tok, state=None) -> LanguageModel:
    return LanguageModel(tiny_gpt(tok.vocab_size, state=state, seed=5, **ROPE), tok, state=state)


class _NoEod:
    """The test tokenizer without an end-of-document token: a completion ends only at max_tokens."""
    eod = None

    def __init__(self, tok) -> None:
        self._tok = tok

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_sixteen_concurrent_requests_get_what_they_get_alone(eval_lm):
    requests = sixteen_requests()
    server, base, engine = serve(eval_lm, CONFIG, start=False)
    try:
        together = all_at_once(base, engine, requests)
        stats = engine.stats()
        assert stats["peak_rows"] >= 4 and stats["completed"] == 16  # they did share batches
        alone = one_at_a_time(base, requests)
    finally:
        server.shutdown()
        server.server_close()
    assert_same_answers(together, alone)
    assert sum(len(out["choices"]) for out in together) == 18
    stopped = [c["finish_reason"] for out in together for c in out["choices"]]
    assert "stop" in stopped and "length" in stopped  # stop strings did end some, and not all
    lps = [c["logprobs"] for out in together for c in out["choices"] if c.get("logprobs")]
    # requests 0 and 8 echo their prompts (scored first, the first token with no log-probability); 4 and 12 not
    assert [lp["token_logprobs"][0] is None for lp in lps] == [True, False, True, False]


def test_full_queue_answers_429(eval_lm):
    server, base, engine = serve(eval_lm, EngineConfig(max_queue=2), start=False)
    body = {"prompt": "The baker", "max_tokens": 3, "temperature": 0}
    try:
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(post, base, "cmpl", body) for _ in range(2)]
            wait_until(lambda: engine.stats()["queued"] == 2, what="two queued requests")
            code, out = post(base, "cmpl-stream", {**body, "stream": True})
            assert code == 429 and out["error"]["type"] == "rate_limit_error" and "queue is full" in \
                out["error"]["message"]
            engine.start()
            assert [f.result(timeout=30)[0] for f in waiting] == [200, 200]
        assert post(base, "cmpl", body)[0] == 200  # room again
    finally:
        server.shutdown()
        server.server_close()


def _raw_post(base: str, path: str, body: dict) -> socket.socket:
    host, port = base[len("http://"):].split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (path.encode(), len(data), data))
    return sock


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_frees_its_row(eval_tokenizer, stream):
    lm = rope_lm(_NoEod(eval_tokenizer))  # no position limit, no end of document: 2048 tokens take seconds
    server, base, engine = serve(lm, EngineConfig(batch_rows=1))
    body = {"prompt": "The baker", "max_tokens": 2048, "temperature": 0, "stream": stream}
    try:
        sock = _raw_post(base, "/v1/completions", body)
        if stream:  # read until the first event: generation is under way
            seen = b""
            while b"data: " not in seen:
                seen += sock.recv(4096)
        else:
            wait_until(lambda: engine.stats()["rows"] == 1, what="the request holding a row")
        sock.close()
        wait_until(lambda: engine.stats()["cancelled"] == 1 and engine.stats()["rows"] == 0, timeout=10,
                   what="the row freed")
        assert engine.stats()["completed"] == 0 and engine.stats()["active_requests"] == 0
        # the one row is free: the next request is served
        code, out = post(base, "cmpl", {"prompt": "Tom", "max_tokens": 3, "temperature": 0})
        assert code == 200 and out["choices"][0]["finish_reason"] == "length"
    finally:
        server.shutdown()
        server.server_close()


def tp_worker(rank: int, world: int, tokenizer_path: str):
    from mwb.core.parallel import ParallelDims, build_state
    from mwb.core.tokenizers import load_tokenizer
    from mwb.evaluation.engine import ServingEngine

    tok = load_tokenizer(tokenizer_path)
    state = build_state(ParallelDims(world_size=world, tp=world))
    lm = rope_lm(tok, state)
    if rank != 0:
        ServingEngine(lm, CONFIG, start=False).follow()
        return None
    server, base, engine = serve(lm, CONFIG, start=False)
    try:
        answers = all_at_once(base, engine, sixteen_requests())
        return answers, engine.stats(), engine.batcher.cache.k[0].size(1)
    finally:
        server.shutdown()
        server.server_close()  # closes the engine: the other rank's follow() returns


@pytest.mark.multiprocess
def test_sixteen_concurrent_requests_under_tensor_parallelism(eval_tokenizer, eval_tokenizer_path):
    ranks = run_ranks(tp_worker, 2, eval_tokenizer_path, timeout_s=120)
    together, stats, kv_heads = ranks[0]
    assert ranks[1] is None and stats["peak_rows"] >= 4 and stats["completed"] == 16
    assert kv_heads == 2  # each rank's cache holds its own 2 of the 4 kv heads
    server, base, _ = serve(rope_lm(eval_tokenizer), CONFIG)  # one process, one request at a time
    try:
        alone = one_at_a_time(base, sixteen_requests())
    finally:
        server.shutdown()
        server.server_close()
    assert_same_answers(together, alone)
