"""An OpenAI-compatible server (``POST /v1/completions`` and ``POST /v1/chat/completions``, both with
streaming, ``GET /v1/models``) on the standard library's ``ThreadingHTTPServer``, generating through the
serving engine (:mod:`.engine`).

Why the standard library: no extra dependency, and the protocol is small. Each connection gets a thread;
the threads hand requests to the engine, whose one scheduler thread batches them as they arrive
(continuous batching), and wait for their completions or stream them. Every request is validated before
the model is touched (:mod:`.openai_requests`) and answered with HTTP 400 and ``{"error": {"message",
"type"}}`` when invalid; a full queue is a 429 of the same shape, any other failure a 500, so a bad request
can never bring the server down. A client that disconnects (seen while waiting, or on a failed write) has
its rows freed at the engine's next step. It binds 127.0.0.1 unless told otherwise.

Log-probabilities follow the OpenAI/lm-evaluation-harness convention: with ``echo: true`` the prompt's
tokens come first and the first one has ``null`` log-probability (nothing precedes it).

Chat requests (:mod:`.chat_api`) are rendered with the model's chat template, or the plain format when it
has none (:mod:`.chat_format`). ``"stream": true`` answers with server-sent events (``data: {...}`` chunks,
then ``data: [DONE]``) in HTTP/1.1 chunked transfer encoding, so the connection stays usable afterwards.
"""
from __future__ import annotations

import json
import select
import socket
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

from .chat_api import chat_completion
from .chat_format import ChatFormat
from .engine import EngineConfig, QueueFull, ServingEngine
from .openai_requests import CompletionRequest, Limits, RequestError, _num, parse_request
from .sampling import Generation, SamplingParams
from .streaming import DeltaStreamer

__all__ = ["CompletionService", "Limits", "RequestError", "make_server", "parse_request"]


class ClientGone(ConnectionResetError):
    """The client closed its connection before its answer was complete."""


def peer_closed(sock) -> bool:
    """Whether the client has closed ``sock`` (readable with nothing to read), without consuming data."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except (OSError, ValueError):
        return True


def _usage(gens: list[Generation], n: int) -> dict:
    """Token counts of a request's completions (each prompt counted once, not once per sample)."""
    n_prompt = sum(len(g.prompt_tokens) for g in gens[::n])
    n_done = sum(len(g.tokens) for g in gens)
    return {"prompt_tokens": n_prompt, "completion_tokens": n_done, "total_tokens": n_prompt + n_done}


class CompletionService:
    """The engine behind the endpoints, and the translation between OpenAI JSON and its completions."""

    def __init__(self, lm, model_name: str = "mwb", limits: Limits = Limits(),
                 chat_format: ChatFormat = ChatFormat(), engine: Optional[ServingEngine] = None) -> None:
        self.lm, self.model_name, self.limits, self.chat_format = lm, model_name, limits, chat_format
        self.engine = engine or ServingEngine(lm)
        self.created = int(time.time())

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "mwb"}]}

    def run(self, prompts: list, params: SamplingParams, echo: bool, streamer: Optional[DeltaStreamer],
            alive: Callable[[], bool]) -> list[Generation]:
        """Generate through the engine: streamed to ``streamer`` or waited for; cancelled (and ClientGone
        raised) when ``alive()`` turns false or a write fails. QueueFull when the queue is full."""
        try:
            req = self.engine.submit(prompts, params, echo=echo, stream=streamer is not None)
        except ValueError as e:  # e.g. a prompt longer than the model's context
            raise RequestError(str(e)) from None
        try:
            if streamer is not None:
                for index, tokens in req.stream(alive=alive):
                    streamer.step(index, tokens)
            else:
                while not req.done.wait(0.05):
                    if not alive():
                        break
        except BaseException:
            req.cancel()
            raise
        if not req.done.is_set() or req.cancelled:
            req.cancel()
            raise ClientGone("the client disconnected")
        return req.result()

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

    def complete(self, req: CompletionRequest, alive: Callable[[], bool] = lambda: True) -> dict:
        params, echo, want_logprobs = req.params, req.echo, req.want_logprobs
        gens = self.run(req.prompts, params, echo and want_logprobs, None, alive)
        choices = []
        for i, g in enumerate(gens):
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
                "model": self.model_name, "choices": choices, "usage": _usage(gens, params.n)}

    def stream_complete(self, req: CompletionRequest, send: Callable[[dict], None],
                        alive: Callable[[], bool] = lambda: True) -> None:
        """``/v1/completions`` with ``stream``: ``text_completion`` chunks with text deltas per choice (the
        prompt first with ``echo``), then each choice's ``finish_reason``, then (``include_usage``) the counts."""
        head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
                "model": self.model_name}
        n = req.params.n
        prompts = [p if isinstance(p, str) else self.lm.decode(p) for p in req.prompts]

        def chunk(index: int, text: str, reason: Optional[str]) -> dict:
            return {**head, "choices": [{"text": text, "index": index, "logprobs": None, "finish_reason": reason}]}

        streamer = DeltaStreamer(self.lm, req.params.stop, send,
                                 lambda i, text, first: (chunk(i, text, None) if text else None),
                                 lambda i, reason: chunk(i, "", reason),
                                 prefix=lambda i: prompts[i // n] if req.echo else "")
        gens = self.run(req.prompts, req.params, False, streamer, alive)
        for i, g in enumerate(gens):
            streamer.finish(i, g)
        if req.include_usage:
            send({**head, "choices": [], "usage": _usage(gens, n)})


def _handler(service: CompletionService, quiet: bool):
    class Handler(BaseHTTPRequestHandler):
        server_version = "mwb-serve"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # noqa: D401 - stdlib hook
            if not quiet:
                super().log_message(fmt, *args)

        def _send(self, code: int, obj: dict, headers: Optional[dict] = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, kind: str = "invalid_request_error",
                   headers: Optional[dict] = None) -> None:
            self._send(code, {"error": {"message": message, "type": kind}}, headers)

        def _alive(self) -> bool:
            return not peer_closed(self.connection)

        def do_GET(self):
            path = self.path.split("?")[0].rstrip("/")
            if path == "/v1/models":
                self._send(200, service.models())
            elif path in ("/health", ""):
                self._send(200, {"status": "ok"})
            else:
                self._error(404, f"no route GET {self.path}", "not_found_error")

        def _stream(self, produce: Callable[[Callable], None]) -> None:
            """Chunked server-sent events from ``produce(send)``; headers go out with the first chunk, so an
            error found before generation starts (a bad request, a full queue) is still a plain answer."""
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
                produce(send)
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
                return self._stream(lambda send: chat_completion(service, body, send, _num, RequestError,
                                                                 self._alive))
            self._send(200, chat_completion(service, body, None, _num, RequestError, self._alive))

        def _complete(self, body) -> None:
            req = parse_request(body, service.lm, service.limits)
            if req.stream:
                return self._stream(lambda send: service.stream_complete(req, send, self._alive))
            self._send(200, service.complete(req, self._alive))

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
                    self._complete(body)
            except RequestError as e:
                self._error(400, str(e))
            except QueueFull as e:
                self._error(429, str(e), "rate_limit_error", {"Retry-After": "1"})
            except (BrokenPipeError, ConnectionResetError):  # the client left (its rows are freed)
                self.close_connection = True
            except Exception as e:  # never let one request take the server down
                self._error(500, f"{type(e).__name__}: {e}", "server_error")

    return Handler


class OpenAIServer(ThreadingHTTPServer):
    """The HTTP server; ``engine`` is the serving engine behind it, closed with the server."""
    daemon_threads = True
    request_queue_size = 256  # listen backlog: many clients connect at once (the stdlib default is 5)
    engine: ServingEngine

    def server_close(self) -> None:
        super().server_close()
        self.engine.close()


def make_server(lm, host: str = "127.0.0.1", port: int = 8000, model_name: str = "mwb",
                limits: Limits = Limits(), quiet: bool = False,
                chat_format: Optional[ChatFormat] = None, engine_config: EngineConfig = EngineConfig(),
                engine: Optional[ServingEngine] = None) -> OpenAIServer:
    """A bound (not yet serving) server; ``port=0`` picks a free port (see ``server.server_address``).
    ``chat_format``: how chat messages become a prompt (default: the plain format). ``engine``: a serving
    engine to use (default: one started here with ``engine_config``)."""
    engine = engine or ServingEngine(lm, engine_config)
    service = CompletionService(lm, model_name, limits, chat_format or ChatFormat(), engine)
    try:
        server = OpenAIServer((host, port), _handler(service, quiet))
    except OSError:
        engine.close()
        raise
    server.engine = engine
    return server
