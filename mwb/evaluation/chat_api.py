"""OpenAI's ``POST /v1/chat/completions`` through the serving engine (:mod:`.engine`): messages are rendered
with the model's chat format (:mod:`.chat_format`), the reply is generated like a completion and returned as
a ``chat.completion``, or streamed as ``chat.completion.chunk`` server-sent events ending ``data: [DONE]``.

Streaming sends text as it is decoded, never taking back what was sent (:mod:`.streaming`). The finishing
chunk of each choice (empty delta, ``finish_reason``) comes when the whole request is done; with
``stream_options.include_usage`` a last chunk carries the token counts.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .chat_format import message_text
from .sampling import SamplingParams
from .streaming import DeltaStreamer

ROLES = ("system", "user", "assistant", "developer")


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat request: the rendered prompt, sampling parameters and the streaming choice."""
    prompt: str
    params: SamplingParams
    stream: bool
    include_usage: bool


def parse_chat_request(body: Any, chat_format, lm, limits, number, request_error) -> ChatRequest:
    """``body`` (decoded JSON) → :class:`ChatRequest`; ``number(body, key, default, lo, hi, integer)`` and
    ``request_error`` are the server's validators, so both endpoints answer bad input the same way."""
    if not isinstance(body, dict):
        raise request_error("the request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise request_error("'messages' must be a non-empty list of {\"role\", \"content\"} objects")
    messages, chars = [], 0
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise request_error(f"messages[{i}] needs a 'role' of {', '.join(ROLES)}")
        try:
            text = message_text(m.get("content"), f"messages[{i}]")
        except ValueError as e:
            raise request_error(str(e)) from None
        chars += len(text)
        messages.append({"role": "system" if m["role"] == "developer" else m["role"], "content": text})
    if chars > limits.max_prompt_chars:
        raise request_error(f"the messages have {chars} characters; the limit is {limits.max_prompt_chars}")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = number(body, key, min(512, limits.max_tokens), 1, limits.max_tokens, integer=True)
    temperature = number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise request_error("'top_p' must be greater than 0")
    n = number(body, "n", 1, 1, limits.max_prompts, integer=True)
    seed = number(body, "seed", None, -(1 << 63), (1 << 63) - 1, integer=True)
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)) or len(stop) > limits.max_stops:
        raise request_error(f"'stop' must be a string or a list of at most {limits.max_stops} strings")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise request_error("'stream' must be true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise request_error("'stream_options' must be an object")
    try:
        prompt = chat_format.render(messages)
    except Exception as e:  # a template that rejects these messages (raise_exception) or fails to render
        raise request_error(f"the chat template cannot render these messages: {e}") from None
    params = SamplingParams(max_tokens=max_tokens, temperature=float(temperature), top_p=float(top_p), n=n,
                            seed=seed, stop=tuple(dict.fromkeys(list(chat_format.stops) + stop)))
    return ChatRequest(prompt, params, stream, bool(options.get("include_usage")))


def chat_completion(service, body: Any, send: Optional[Callable[[dict], None]] = None,
                    number=None, request_error=ValueError,
                    alive: Callable[[], bool] = lambda: True) -> Optional[dict]:
    """Answer one chat request: the ``chat.completion`` object, or (``stream``) every chunk through ``send``
    and ``None``. ``service``: the server's model holder (``lm``, ``limits``, ``chat_format``, and
    ``run(prompts, params, echo, streamer, alive)``, which generates through the serving engine);
    ``alive()`` says whether the client is still connected."""
    req = parse_chat_request(body, service.chat_format, service.lm, service.limits, number, request_error)
    if req.stream and send is None:
        raise request_error("streaming needs a server that can stream")
    rid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    head = {"id": rid, "created": created, "model": service.model_name}
    streamer = None
    if req.stream:
        def chunk(choice: dict) -> dict:
            return {**head, "object": "chat.completion.chunk", "choices": [choice]}

        def delta(index: int, text: str, first: bool) -> dict:
            d = {"role": "assistant", "content": ""} if first else {"content": text}
            return chunk({"index": index, "delta": d, "logprobs": None, "finish_reason": None})

        streamer = DeltaStreamer(service.lm, req.params.stop, send, delta,
                                 lambda index, reason: chunk({"index": index, "delta": {}, "logprobs": None,
                                                              "finish_reason": reason}))
    gens = service.run([req.prompt], req.params, False, streamer, alive)
    n_prompt = len(gens[0].prompt_tokens)
    n_done = sum(len(g.tokens) for g in gens)
    usage = {"prompt_tokens": n_prompt, "completion_tokens": n_done, "total_tokens": n_prompt + n_done}
    if streamer is not None:
        for i, g in enumerate(gens):
            streamer.finish(i, g)
        if req.include_usage:
            send({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        return None
    choices = [{"index": i, "message": {"role": "assistant", "content": g.text}, "logprobs": None,
                "finish_reason": g.finish_reason} for i, g in enumerate(gens)]
    return {**head, "object": "chat.completion", "choices": choices, "usage": usage}
