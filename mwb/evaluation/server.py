"""An OpenAI-compatible server (``POST /v1/completions``, ``POST /v1/chat/completions`` with streaming,
``GET /v1/models``) on the standard library's ``ThreadingHTTPServer``.

Why the standard library: no extra dependency, and the protocol is small. Each connection gets a thread,
but the model runs under one lock, so requests are queued rather than interleaved (a KV cache or a TP
collective must never see two requests at once). Every request is validated before the model is touched
— JSON types, prompt size, ``max_tokens`` bound, list lengths — and answered with HTTP 400 and
``{"error": {"message", "type"}}`` when invalid; any other failure is a 500 with the same shape, so a bad
request can never bring the server down. It binds 127.0.0.1 unless told otherwise.

Log-probabilities follow the OpenAI/lm-evaluation-harness convention: with ``echo: true`` the prompt's
tokens come first and the first one has ``null`` log-probability (nothing precedes it).

Chat requests (:mod:`.chat_api`) are rendered with the model's chat template, or the plain format when it
has none (:mod:`.chat_format`); ``"stream": true`` answers with server-sent events (``data: {...}`` chunks,
then ``data: [DONE]``) in HTTP/1.1 chunked transfer encoding, so the connection stays usable afterwards.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from .chat_api import chat_completion
from .chat_format import ChatFormat
from .generation import SamplingParams, generate


class RequestError(ValueError):
    """A request the client must fix (HTTP 400)."""


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; anything beyond is a 400, not a slow or crashed server."""
    max_body_bytes: int = 4 << 20
    max_prompt_chars: int = 100_000
    max_prompts: int = 64
    max_tokens: int = 2048
    max_logprobs: int = 20
    max_stops: int = 4


def _num(body: dict, key: str, default, lo: float, hi: float, integer: bool = False):
    v = body.get(key, default)
    if v is None:
        return default
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool):
        raise RequestError(f"'{key}' must be {'an integer' if integer else 'a number'}, got {json.dumps(v)}")
    if not lo <= v <= hi:
        raise RequestError(f"'{key}' must be between {lo} and {hi}, got {v}")
    return v


def _prompts(body: dict, lm, limits: Limits) -> list:
    """``prompt``: a string, a list of strings, a list of token ids or a list of such lists."""
    if "prompt" not in body:
        raise RequestError("'prompt' is required")
    p = body["prompt"]
    if isinstance(p, str):
        items = [p]
    elif isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        items = [p]
    elif isinstance(p, list):
        items = p
    else:
        raise RequestError("'prompt' must be a string, a list of strings or a list of token-id lists")
    if not items:
        raise RequestError("'prompt' must not be an empty list")
    if len(items) > limits.max_prompts:
        raise RequestError(f"at most {limits.max_prompts} prompts per request, got {len(items)}")
    for item in items:
        if isinstance(item, str):
            if len(item) > limits.max_prompt_chars:
                raise RequestError(f"a prompt has {len(item)} characters; the limit is {limits.max_prompt_chars}")
        elif isinstance(item, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            if len(item) > lm.max_length:
                raise RequestError(f"a prompt has {len(item)} tokens; the model takes at most {lm.max_length}")
            if any(not 0 <= t < lm.vocab_size for t in item):
                raise RequestError(f"prompt token ids must be in [0, {lm.vocab_size})")
        else:
            raise RequestError("each prompt must be a string or a list of integer token ids")
    return items


def parse_request(body: Any, lm, limits: Limits) -> tuple[list, SamplingParams, bool, int]:
    """(prompts, sampling parameters, echo, logprobs) from a decoded JSON body, or a RequestError."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    prompts = _prompts(body, lm, limits)
    max_tokens = _num(body, "max_tokens", 16, 0, limits.max_tokens, integer=True)
    temperature = _num(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _num(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise RequestError("'top_p' must be greater than 0")
    top_k = _num(body, "top_k", 0, 0, lm.vocab_size, integer=True)
    logprobs = _num(body, "logprobs", 0, 0, limits.max_logprobs, integer=True)
    seed = _num(body, "seed", None, -(1 << 63), (1 << 63) - 1, integer=True)
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError("'stop' must be a string or a list of strings")
    if len(stop) > limits.max_stops:
        raise RequestError(f"at most {limits.max_stops} stop strings, got {len(stop)}")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise RequestError("'echo' must be true or false")
    n = _num(body, "n", 1, 1, limits.max_prompts, integer=True)
    if len(prompts) * n > limits.max_prompts:
        raise RequestError(f"at most {limits.max_prompts} completions per request (prompts × n), "
                           f"got {len(prompts) * n}")
    if body.get("best_of", n) != n:
        raise RequestError("only best_of = n is supported")
    if body.get("stream"):
        raise RequestError("streaming is not supported: send 'stream': false")
    params = SamplingParams(max_tokens=max_tokens, temperature=float(temperature), top_k=top_k,
                            top_p=float(top_p), stop=tuple(stop), seed=seed,
                            top_logprobs=logprobs if logprobs else 0, n=n)
    return prompts, params, echo, body.get("logprobs") is not None


class CompletionService:
    """The model behind a lock, and the translation between OpenAI JSON and :func:`generate`."""

    def __init__(self, lm, model_name: str = "mwb", limits: Limits = Limits(),
                 chat_format: ChatFormat = ChatFormat()) -> None:
        self.lm, self.model_name, self.limits, self.chat_format = lm, model_name, limits, chat_format
        self.lock = threading.Lock()
        self.created = int(time.time())

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "mwb"}]}

    def _token_str(self, t: int) -> str:
        return self.lm.decode([t])

    def _logprobs(self, tokens: list[int], lps: list, tops: Optional[list], start: int) -> dict:
        strs = [self._token_str(t) for t in tokens]
        offsets, pos = [], start
        for s in strs:
            offsets.append(pos)
            pos += len(s)
        top = None
        if tops is not None:
            top = [None if d is None else {self._token_str(k): v for k, v in d.items()} for d in tops]
        return {"tokens": strs, "token_logprobs": lps, "top_logprobs": top, "text_offset": offsets}

    def complete(self, body: Any) -> dict:
        prompts, params, echo, want_logprobs = parse_request(body, self.lm, self.limits)
        with self.lock:
            try:
                gens = generate(self.lm, prompts, params, echo_logprobs=echo and want_logprobs)
            except ValueError as e:  # e.g. a prompt longer than the model's context
                raise RequestError(str(e)) from None
        choices, n_prompt, n_done = [], 0, 0
        for i, g in enumerate(gens):
            n_prompt += len(g.prompt_tokens) if i % params.n == 0 else 0  # each prompt counted once
            n_done += len(g.tokens)
            text = (g.prompt + g.text) if echo else g.text
            lp = None
            if want_logprobs:
                k = params.top_logprobs
                tops = [dict(d) for d in g.top_logprobs] if k else None
                if echo:
                    ptops = (g.prompt_top_logprobs or [None] * len(g.prompt_tokens)) if k else None
                    lp = self._logprobs(g.prompt_tokens + g.tokens, list(g.prompt_logprobs or []) + g.logprobs,
                                        (ptops + tops) if k else None, 0)
                else:
                    lp = self._logprobs(g.tokens, g.logprobs, tops, len(g.prompt))
            choices.append({"text": text, "index": i, "logprobs": lp, "finish_reason": g.finish_reason})
        return {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
                "model": self.model_name, "choices": choices,
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_done,
                          "total_tokens": n_prompt + n_done}}


def _handler(service: CompletionService, quiet: bool):
    class Handler(BaseHTTPRequestHandler):
        server_version = "mwb-serve"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # noqa: D401 - stdlib hook
            if not quiet:
                super().log_message(fmt, *args)

        def _send(self, code: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, kind: str = "invalid_request_error") -> None:
            self._send(code, {"error": {"message": message, "type": kind}})

        def do_GET(self):
            path = self.path.split("?")[0].rstrip("/")
            if path == "/v1/models":
                self._send(200, service.models())
            elif path in ("/health", ""):
                self._send(200, {"status": "ok"})
            else:
                self._error(404, f"no route GET {self.path}", "not_found_error")

        def _stream_chat(self, body) -> None:
            """Chunked server-sent events; headers go out with the first chunk, so a request error found
            before generation starts is still a plain 400."""
            started = []

            def send(obj) -> None:
                if not started:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    started.append(True)
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            try:
                chat_completion(service, body, send, _num, RequestError)
                send(b"[DONE]")
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception as e:  # after the headers, an error can only be one more event
                if not started:
                    raise
                kind = "invalid_request_error" if isinstance(e, RequestError) else "server_error"
                send({"error": {"message": f"{type(e).__name__}: {e}", "type": kind}})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _chat(self, body) -> None:
            if isinstance(body, dict) and body.get("stream") is True:
                return self._stream_chat(body)
            self._send(200, chat_completion(service, body, None, _num, RequestError))

        def do_POST(self):
            path = self.path.split("?")[0].rstrip("/")
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self.close_connection = True
                return self._error(411, "a Content-Length header is required")
            if length > service.limits.max_body_bytes:
                self.close_connection = True  # do not read an oversized body
                return self._error(413, f"request body of {length} bytes exceeds {service.limits.max_body_bytes}")
            raw = self.rfile.read(length)
            if path not in ("/v1/completions", "/v1/chat/completions"):
                return self._error(404, f"no route POST {self.path}", "not_found_error")
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                return self._error(400, f"the request body is not valid JSON ({e})")
            try:
                if path == "/v1/chat/completions":
                    self._chat(body)
                else:
                    self._send(200, service.complete(body))
            except RequestError as e:
                self._error(400, str(e))
            except (BrokenPipeError, ConnectionResetError):  # the client left mid-stream
                self.close_connection = True
            except Exception as e:  # never let one request take the server down
                self._error(500, f"{type(e).__name__}: {e}", "server_error")

    return Handler


def make_server(lm, host: str = "127.0.0.1", port: int = 8000, model_name: str = "mwb",
                limits: Limits = Limits(), quiet: bool = False,
                chat_format: Optional[ChatFormat] = None) -> ThreadingHTTPServer:
    """A bound (not yet serving) server; ``port=0`` picks a free port (see ``server.server_address``).
    ``chat_format``: how chat messages become a prompt (default: the plain format)."""
    service = CompletionService(lm, model_name, limits, chat_format or ChatFormat())
    server = ThreadingHTTPServer((host, port), _handler(service, quiet))
    server.daemon_threads = True
    return server
