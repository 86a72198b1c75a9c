"""Validation of ``POST /v1/completions`` bodies: every field's type and range checked before the model is
touched — JSON types, prompt size, ``max_tokens`` bound, list lengths — so a bad request is an HTTP 400
with a message naming the field, never a slow or crashed server."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .sampling import SamplingParams


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


@dataclass(frozen=True)
class CompletionRequest:
    """A validated ``/v1/completions`` body."""
    prompts: list
    params: SamplingParams
    echo: bool
    want_logprobs: bool
    stream: bool
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the token counts


def parse_request(body: Any, lm, limits: Limits) -> CompletionRequest:
    """The validated request from a decoded JSON body, or a RequestError."""
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
    stream = False if body.get("stream") is None else body["stream"]
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be true or false")
    if stream and body.get("logprobs") is not None:
        raise RequestError("'logprobs' are not streamed: send 'stream': false to get them")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("'stream_options' must be an object")
    params = SamplingParams(max_tokens=max_tokens, temperature=float(temperature), top_k=top_k,
                            top_p=float(top_p), stop=tuple(stop), seed=seed,
                            top_logprobs=logprobs if logprobs else 0, n=n)
    return CompletionRequest(prompts, params, echo, body.get("logprobs") is not None, stream,
                             bool(options.get("include_usage")))
