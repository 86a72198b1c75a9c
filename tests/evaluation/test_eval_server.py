"""The OpenAI-compatible server, over real HTTP on a free 127.0.0.1 port (served from a thread)."""
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.server import Limits, make_server


@pytest.fixture(scope="module")
def base_url(eval_lm):
    server = make_server(eval_lm, "127.0.0.1", 0, model_name="tiny", limits=Limits(max_tokens=64, max_prompts=4),
                         quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    server.shutdown()
    server.server_close()


def _post(url: str, body, raw: bytes = None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + "/v1/completions", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_models_and_completion(base_url, eval_lm):
    with urllib.request.urlopen(base_url + "/v1/models", timeout=30) as r:
        assert json.loads(r.read())["data"][0]["id"] == "tiny"
    code, out = _post(base_url, {"prompt": ["The baker", "Tom searched"], "max_tokens": 6, "temperature": 0})
    assert code == 200 and out["object"] == "text_completion" and len(out["choices"]) == 2
    want = generate(eval_lm, ["The baker", "Tom searched"], SamplingParams(max_tokens=6, temperature=0))
    assert [c["text"] for c in out["choices"]] == [g.text for g in want]
    assert out["usage"]["completion_tokens"] == sum(len(g.tokens) for g in want)
    ids = eval_lm.encode("The baker")
    code, tok = _post(base_url, {"prompt": ids, "max_tokens": 6, "temperature": 0, "logprobs": 2})
    assert code == 200 and tok["choices"][0]["text"] == want[0].text
    lp = tok["choices"][0]["logprobs"]
    assert lp["token_logprobs"] == pytest.approx(want[0].logprobs, abs=1e-5) and len(lp["top_logprobs"][0]) <= 2


def test_n_samples_per_prompt(base_url, eval_lm):
    body = {"prompt": ["The baker", "Tom searched"], "max_tokens": 5, "temperature": 1.0, "seed": 3, "n": 2}
    code, out = _post(base_url, body)
    want = generate(eval_lm, body["prompt"], SamplingParams(max_tokens=5, temperature=1.0, seed=3, n=2))
    assert code == 200 and [c["text"] for c in out["choices"]] == [g.text for g in want]
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert out["usage"]["prompt_tokens"] == len(eval_lm.encode("The baker")) + len(eval_lm.encode("Tom searched"))


def test_echo_logprobs_equal_the_models(base_url, eval_lm):
    text = "The detective studied the muddy footprints"
    code, out = _post(base_url, {"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1})
    assert code == 200
    choice = out["choices"][0]
    assert choice["text"] == text
    lp = choice["logprobs"]
    want = eval_lm.token_logprobs(eval_lm.encode(text))
    assert lp["token_logprobs"][0] is None and want[0] is None
    assert lp["token_logprobs"][1:] == pytest.approx(want[1:], abs=1e-5)
    assert "".join(lp["tokens"]) == text and lp["top_logprobs"][0] is None
    assert lp["text_offset"][0] == 0 and all(len(d) == 1 for d in lp["top_logprobs"][1:])


@pytest.mark.parametrize("body,fragment", [
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10_000}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": 5}, "prompt"),
    ({"max_tokens": 1}, "prompt"),
    ({"prompt": ["a"] * 5}, "at most 4"),
    ({"prompt": ["a", "b"], "n": 3}, "at most 4 completions"),
    ({"prompt": "x", "n": 2, "best_of": 3}, "best_of"),
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": "x", "stop": [1]}, "stop"),
    ({"prompt": "x", "echo": "yes"}, "echo"),
    ({"prompt": [10 ** 6]}, "token ids"),
    ({"prompt": "x", "stream": True, "logprobs": 1}, "not streamed"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ([1, 2], "JSON object"),
])
def test_invalid_requests_are_400_json(base_url, body, fragment):
    code, out = _post(base_url, body)
    assert code == 400 and out["error"]["type"] == "invalid_request_error" and fragment in out["error"]["message"]


def _stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        events = [line[6:] for line in r.read().decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_streamed_completions_add_up_to_the_completion(base_url, eval_lm):
    body = {"prompt": ["The baker", "Tom searched"], "max_tokens": 10, "temperature": 0.9, "seed": 8, "n": 2,
            "echo": True, "stop": [" the"]}
    code, whole = _post(base_url, body)
    events = _stream(base_url, {**body, "stream_options": {"include_usage": True}})
    texts, reasons = {}, {}
    for e in events[:-1]:
        assert e["object"] == "text_completion" and len(e["choices"]) == 1
        c = e["choices"][0]
        texts[c["index"]] = texts.get(c["index"], "") + c["text"]
        if c["finish_reason"]:
            reasons[c["index"]] = c["finish_reason"]
    assert code == 200 and [texts[i] for i in range(4)] == [c["text"] for c in whole["choices"]]
    assert [reasons[i] for i in range(4)] == [c["finish_reason"] for c in whole["choices"]]
    assert events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]
    assert whole["choices"][2]["text"].startswith("Tom searched")  # echo: the prompt, then the completion


def test_malformed_json_and_unknown_route(base_url):
    code, out = _post(base_url, None, raw=b"{not json")
    assert code == 400 and "not valid JSON" in out["error"]["message"]
    req = urllib.request.Request(base_url + "/v1/embeddings", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 404 and "error" in json.loads(e.value.read())


def test_concurrent_identical_requests_get_the_same_text(base_url):
    body = {"prompt": "Sam planted", "max_tokens": 8, "temperature": 0.8, "seed": 5}
    ref = _post(base_url, body)[1]["choices"][0]["text"]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: _post(base_url, body), range(6)))
    assert all(code == 200 for code, _ in results)
    assert {out["choices"][0]["text"] for _, out in results} == {ref}
    assert _post(base_url, {"prompt": "still alive", "max_tokens": 1})[0] == 200
