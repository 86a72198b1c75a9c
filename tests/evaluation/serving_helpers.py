"""Sixteen different requests for the serving engine, a small HTTP client for them (streaming and not, both
endpoints) and the comparison of two sets of answers — shared by the one-process and TP = 2 tests."""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from mwb.evaluation.engine import EngineConfig, ServingEngine
from mwb.evaluation.server import Limits, make_server

from .eval_helpers import LAMBADA

@pytest.fixture(autouse=True)  # imported by the serving tests, which it then wraps
def one_thread():
    """One intra-op thread: these models are tiny, and on a shared 2-core machine two threads wait on each
    other far longer than they compute (tens of times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


ENDPOINTS = ("cmpl", "cmpl-stream", "chat", "chat-stream")


def sixteen_requests() -> list[tuple[str, dict]]:
    """16 (endpoint, body) pairs: different prompts and lengths, greedy and seeded sampling (temperature,
    top-k, top-p, n = 2), stop strings, logprobs and echo, streamed and not."""
    with open(LAMBADA) as f:
        texts = [json.loads(line)["text"] for line in f]
    stops = [(), (" the",), (".", "e"), ("a",)]
    out = []
    for i in range(16):
        kind = ENDPOINTS[i % 4]
        body = {"max_tokens": 6 + 3 * (i % 7), "temperature": [0.0, 0.8, 1.0, 1.3][(i // 4) % 4],
                "seed": 100 + i, "stop": list(stops[(i + i // 4) % 4])}
        if i % 5 == 2:
            body["top_p"] = 0.9
        if i in (5, 10):
            body["n"] = 2
        text = texts[i % len(texts)][: 12 + 17 * i]
        if kind.startswith("chat"):
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
            if i % 3 == 0:
                body["top_k"] = 20
            if kind == "cmpl" and i % 8 == 0:
                body.update(logprobs=2, echo=True)
            elif kind == "cmpl" and i % 8 == 4:
                body["logprobs"] = 1
            elif kind == "cmpl-stream" and i % 2 == 1:
                body["echo"] = True
        if kind.endswith("stream"):
            body["stream"] = True
        out.append((kind, body))
    return out


def post(base: str, kind: str, body: dict, timeout: float = 60.0) -> tuple[int, dict]:
    """(status, answer); a streamed answer is folded into ``{"choices": [{"text", "finish_reason"}]}``."""
    path = "/v1/chat/completions" if kind.startswith("chat") else "/v1/completions"
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    if not kind.endswith("stream"):
        return status, json.loads(raw)
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    for e in events[:-1]:
        for c in json.loads(e)["choices"]:
            piece = (c["delta"].get("content") or "") if kind.startswith("chat") else c["text"]
            texts[c["index"]] = texts.get(c["index"], "") + piece
            if c["finish_reason"] is not None:
                reasons[c["index"]] = c["finish_reason"]
    return status, {"choices": [{"text": texts[i], "finish_reason": reasons[i]} for i in sorted(texts)]}


def answers(choices: list[dict]) -> list[tuple]:
    """What must match between two answers: text, finish reason and (rounded) log-probabilities."""
    out = []
    for c in choices:
        text = c["message"]["content"] if "message" in c else c["text"]
        lp = c.get("logprobs") or {}
        out.append((text, c["finish_reason"], lp.get("tokens"), lp.get("token_logprobs")))
    return out


def assert_same_answers(got: list[dict], want: list[dict]) -> None:
    for g, w in zip(got, want, strict=True):
        for (text, reason, toks, lps), (wtext, wreason, wtoks, wlps) in zip(answers(g["choices"]),
                                                                            answers(w["choices"]), strict=True):
            assert (text, reason, toks) == (wtext, wreason, wtoks)
            if wlps is not None:
                assert [v is None for v in lps] == [v is None for v in wlps]
                assert [v for v in lps if v is not None] == pytest.approx([v for v in wlps if v is not None],
                                                                          abs=1e-4)


def serve(lm, config: EngineConfig, start: bool = True):
    """(server, base url, engine) on a free 127.0.0.1 port, served from a daemon thread."""
    engine = ServingEngine(lm, config, start=start)
    server = make_server(lm, "127.0.0.1", 0, model_name="tiny", limits=Limits(max_tokens=2048, max_prompts=8),
                         quiet=True, engine=engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}", engine


def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        time.sleep(0.01)


def all_at_once(base: str, engine: ServingEngine, requests: list[tuple[str, dict]]) -> list[dict]:
    """Send every request concurrently to a stopped engine, start it once all are queued (so they share
    batches), and return the answers in order (each must be a 200)."""
    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [pool.submit(post, base, kind, body) for kind, body in requests]
        wait_until(lambda: engine.stats()["queued"] == len(requests), what="every request queued")
        engine.start()
        results = [f.result(timeout=60) for f in futures]
    assert [code for code, _ in results] == [200] * len(requests), results
    return [out for _, out in results]


def one_at_a_time(base: str, requests: list[tuple[str, dict]]) -> list[dict]:
    results = [post(base, kind, body) for kind, body in requests]
    assert [code for code, _ in results] == [200] * len(requests), results
    return [out for _, out in results]
