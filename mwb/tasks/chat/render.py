"""A conversation → one GPT training sample: the chat format's rendering, a loss on every assistant turn.

The text is what serving renders (:class:`~mwb.evaluation.chat_format.ChatFormat`: the checkpoint's chat template,
else the plain ``User: …`` format), so the model learns replies in the very context ``/v1/chat/completions`` and
``mwb chat`` give it. What the loss covers, per assistant turn: what the model has to write after the generation
prompt up to and including the token that ends its reply —

* a template: the reply (with whatever the template puts around it, e.g. Llama-2's leading space) and the end
  token the template closes it with (the tokenizer's ``eos_token``, SmolLM2's ``<|im_end|>``), which is where a
  served reply stops;
* the plain format: ``" " + reply``, then ``"\\nUser:"`` when another turn follows (the stop string serving cuts
  a plain reply at) or, after the last reply, the end-of-document token appended to the sample (serving's other
  stop).

Everything else — system and user turns, role headers, the generation prompt, the text after an end token — is
context without a loss. The spans come from rendering prefixes: the text before reply k is the rendering of the
turns before it with the generation prompt, which must begin the rendering of the whole conversation (a template
that renders earlier turns differently once later ones exist, such as one dropping past reasoning, is refused).
Tokens are those of the whole rendering; a token is a target when its characters overlap a trained span
(:meth:`~mwb.core.tokenizers.base.Tokenizer.encode_offsets`). A conversation longer than ``seq_length + 1``
tokens loses its end (the later turns), as a prompt → target sample loses its target's end.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mwb.core.errors import DataError
from mwb.evaluation.chat_format import ChatFormat


@dataclass(frozen=True)
class Rendering:
    """``text``: the rendered conversation; ``spans``: the trained character spans ``[start, end)``, one per
    assistant turn; ``end_of_document``: the end-of-document token after ``text`` is trained too (the plain
    format's end of the last reply)."""
    text: str
    spans: tuple[tuple[int, int], ...]
    end_of_document: bool


def render(fmt: ChatFormat, messages: Sequence[dict], where: str) -> Rendering:
    """The rendering of ``messages`` (ending with an assistant turn) and its trained spans."""
    text = fmt.render(messages, add_generation_prompt=False)
    spans = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = fmt.render(messages[:k], add_generation_prompt=True)
        through = fmt.render(messages[: k + 1], add_generation_prompt=False)
        if not (through.startswith(before) and text.startswith(through)):
            raise DataError(f"{where}: the chat template ({fmt.source}) does not render this conversation turn by "
                            f"turn: the text before assistant turn {k} does not begin the whole conversation's "
                            f"rendering, so its reply cannot be located")
        reply_end = _reply_end(text, len(before), len(through), m["content"], fmt, where, k)
        last = k == len(messages) - 1
        spans.append((len(before), _closed(text, reply_end, fmt, last, where, k)))
    return Rendering(text, tuple(spans), end_of_document=fmt.template is None)


def _reply_end(text: str, start: int, stop: int, content: str, fmt: ChatFormat, where: str, k: int) -> int:
    """Where the reply's text ends inside its turn ``text[start:stop]`` (a template may strip it)."""
    turn = text[start:stop]
    for candidate in (content, content.strip()):
        at = turn.find(candidate)
        if at >= 0:
            return start + at + len(candidate)
    raise DataError(f"{where}: the chat template ({fmt.source}) changes the text of assistant turn {k}; its reply "
                    f"is not in the rendering")


def _closed(text: str, reply_end: int, fmt: ChatFormat, last: bool, where: str, k: int) -> int:
    """The end of the trained span: after the token that closes the reply (module docstring)."""
    rest = text[reply_end:]
    if fmt.template is None:
        if last:
            return reply_end  # the end-of-document token follows the text
        for stop in fmt.stops:
            if rest.startswith(stop):
                return reply_end + len(stop)
        raise DataError(f"{where}: assistant turn {k} is followed by neither of {', '.join(map(repr, fmt.stops))}")
    eos = fmt.eos_token
    gap = len(rest) - len(rest.lstrip())
    if not eos or not rest[gap:].startswith(eos):
        raise DataError(f"{where}: the chat template ({fmt.source}) does not close assistant turn {k} with the end "
                        f"token {eos or '(none: tokenizer_config.json names no eos_token)'!r}, where a served reply "
                        f"stops; mwb trains the reply and that token")
    return reply_end + gap + len(eos)


def trained(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """1 for each token whose characters ``[start, end)`` overlap a span, else 0 (a token with no characters: 0)."""
    return [int(any(s < b and a < e for a, b in spans)) if e > s else 0 for s, e in offsets]


def chat_sample(fmt: ChatFormat, messages: Sequence[dict], tok, seq_length: int, where: str) -> dict:
    """``tokens`` and ``loss_mask`` of ``seq_length + 1`` for one conversation (the layout of
    :func:`~mwb.tasks.api.generative_objective.gpt_sample`; padding is the end-of-document token, no loss)."""
    r = render(fmt, messages, where)
    ids, offsets = tok.encode_offsets(r.text)
    mask = trained(offsets, r.spans)
    if r.end_of_document:
        ids, mask = ids + [tok.eod], mask + [1]
    ids, mask = ids[: seq_length + 1], mask[: seq_length + 1]
    pad = seq_length + 1 - len(ids)
    return {"tokens": np.array(ids + [tok.eod] * pad, dtype=np.int64),
            "loss_mask": np.array(mask + [0] * pad, dtype=np.int64)}
