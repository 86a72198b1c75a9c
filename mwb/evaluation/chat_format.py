"""Chat messages → one prompt string: the model's own chat template when it has one, else a plain format.

Why here: ``/v1/chat/completions`` and ``mwb chat`` must build the prompt the model was tuned on. A
Hugging Face tokenizer directory carries that template as Jinja source — in ``chat_template.jinja`` (the
current layout, which mwb's GGUF conversion writes from the file's ``tokenizer.chat_template`` metadata)
or under ``chat_template`` in ``tokenizer_config.json`` (older layout; a list of named templates uses the
one called ``default``). It is rendered with jinja2 in a sandbox the way ``transformers`` does
(``trim_blocks``, ``lstrip_blocks``, ``raise_exception``, ``bos_token``/``eos_token`` in scope); no model's
template is written in this code. A template-driven reply ends at the tokenizer's end-of-sequence token
(SmolLM2's ``<|im_end|>``).

The plain fallback, for models without a template (mwb's own pretraining runs)::

    System: <system message>
    User: <user message>
    Assistant: <assistant message>
    User: <user message>
    Assistant:

one line per message, roles capitalised, newlines inside a message kept; the reply stops at the next line
that starts a turn (``\\nUser:`` / ``\\nSystem:``) or at the end-of-document token.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional, Sequence

from mwb.core.errors import DataError

PLAIN_STOPS = ("\nUser:", "\nSystem:")


@dataclass(frozen=True)
class ChatFormat:
    """How messages become a prompt. ``template``: Jinja source (``None``: the plain format);
    ``bos_token``/``eos_token``: the tokenizer's, passed to the template; ``source``: where it came from."""
    template: Optional[str] = None
    bos_token: str = ""
    eos_token: str = ""
    source: str = "plain"

    @property
    def stops(self) -> tuple[str, ...]:
        """Strings that end a reply (besides the end-of-document token)."""
        if self.template is None:
            return PLAIN_STOPS
        return (self.eos_token,) if self.eos_token else ()

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The prompt for ``messages`` (``[{"role", "content"}]``), ending where the assistant's reply begins."""
        if self.template is None:
            lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
            return "\n".join(lines + (["Assistant:"] if add_generation_prompt else []))
        return _compiled(self.template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                               bos_token=self.bos_token, eos_token=self.eos_token)


_CACHE: dict[str, object] = {}


def _raise(message: str):
    raise ValueError(message)


def _compiled(source: str):
    """The template compiled once, in jinja2's immutable sandbox (a template is data, not trusted code)."""
    if source not in _CACHE:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
        _CACHE[source] = env.from_string(source)
    return _CACHE[source]


def _token_text(value) -> str:
    if isinstance(value, dict):
        return value.get("content") or ""
    return value if isinstance(value, str) else ""


def chat_format_for(tokenizer_path: Optional[str]) -> ChatFormat:
    """The chat format stored with a tokenizer (its file or directory), or the plain format."""
    if not tokenizer_path:
        return ChatFormat()
    directory = tokenizer_path if os.path.isdir(tokenizer_path) else os.path.dirname(tokenizer_path)
    config: dict = {}
    config_file = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(config_file):
        try:
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
        except ValueError as e:
            raise DataError(f"{config_file} is not valid JSON ({e})") from None
    template, source = None, "plain"
    jinja_file = os.path.join(directory, "chat_template.jinja")
    if os.path.isfile(jinja_file):
        with open(jinja_file, encoding="utf-8") as f:
            template, source = f.read(), jinja_file
    elif config.get("chat_template"):
        template, source = config["chat_template"], config_file
        if isinstance(template, list):  # named templates: [{"name", "template"}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str):
            raise DataError(f"{config_file}: 'chat_template' must be a string or a list with a 'default' entry")
    if template is None:
        return ChatFormat()
    return ChatFormat(template, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")), source)


def message_text(content, where: str) -> str:
    """A message's ``content``: a string, or OpenAI's list of ``{"type": "text", "text"}`` parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ValueError(f"{where}: 'content' must be a string or a list of text parts")
