"""The chat loss mask against the chat format's rendering, character span by character span: render the whole
conversation, find each assistant reply in it (and the end token after it) by searching the text, then check that
the characters of the tokens the mask trains are exactly those spans — for the plain format, a ChatML template,
a template that puts a space around the reply (Llama-2 style) and SmolLM2's own template and tokenizer."""
import json
import os
import shutil

import numpy as np
import pytest

from mwb.core import named_models
from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.evaluation.chat_format import ChatFormat, chat_format_for
from mwb.tasks.chat.render import chat_sample, render, trained
from tests.helpers.checkpoints import TOKENIZER
from tests.helpers.needs import needs

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + eos_token + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPACED = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{{ ' ' + m['content'] + ' ' + eos_token }}"
          "{% else %}{{ '[' + m['role'] + '] ' + m['content'] }}{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}{{ '' }}{% endif %}")
CONVERSATION = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "When do you open?"},
                {"role": "assistant", "content": "At nine, every day."},
                {"role": "user", "content": "And on Sundays?"},
                {"role": "assistant", "content": "Closed on Sundays.\nSorry!"}]


def _tokenizer_dir(tmp_path, template: str, eos: str = "<|endoftext|>") -> str:
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(TOKENIZER, d / "tokenizer.json")
    (d / "chat_template.jinja").write_text(template)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos}))
    return str(d)


def expected_spans(text: str, replies, after) -> list[tuple[int, int]]:
    """Each reply found in ``text`` in turn, from ``after(i)`` characters before it (what precedes a reply in the
    trained span) to the end of the text ``closing(i)`` that follows it."""
    spans, at = [], 0
    for i, reply in enumerate(replies):
        start = text.index(reply, at)
        lead, closing = after(i)
        end = start + len(reply)
        assert text[start - len(lead): start] == lead and text[end:].lstrip(" ").startswith(closing)
        end = end + (len(text[end:]) - len(text[end:].lstrip(" "))) + len(closing)
        spans.append((start - len(lead), end))
        at = end
    return spans


def masked_runs(tok, text: str, sample: dict) -> list[tuple[int, int]]:
    """The maximal character runs covered by the trained tokens of ``sample`` (which must be ``text``'s tokens)."""
    ids, offsets = tok.encode_offsets(text)
    n = len(ids)
    assert sample["tokens"][:n].tolist() == ids  # the sample is the rendering's own tokenization
    covered = np.zeros(len(text) + 1, dtype=bool)
    for (s, e), m in zip(offsets, sample["loss_mask"][:n]):
        if m:
            covered[s:e] = True
    edges = np.flatnonzero(np.diff(np.concatenate([[0], covered.astype(int)])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def _replies():
    return [m["content"] for m in CONVERSATION if m["role"] == "assistant"]


def test_plain_format_trains_each_reply_and_what_ends_it():
    tok = load_tokenizer(TOKENIZER)
    fmt = ChatFormat()
    text = fmt.render(CONVERSATION, add_generation_prompt=False)
    sample = chat_sample(fmt, CONVERSATION, tok, 256, "test")
    # the space after "Assistant:", the reply, then "\nUser:" (a middle turn) or the end-of-document token (the last)
    want = expected_spans(text, _replies(), lambda i: (" ", "\nUser:" if i == 0 else ""))
    assert masked_runs(tok, text, sample) == want
    n = len(tok.encode(text))
    assert sample["tokens"][n] == tok.eod and sample["loss_mask"][n] == 1 and sample["loss_mask"][n + 1:].sum() == 0


@pytest.mark.parametrize("template,lead", [(CHATML, ""), (SPACED, " ")], ids=["chatml", "spaced"])
def test_template_trains_each_reply_and_its_end_token(tmp_path, template, lead):
    d = _tokenizer_dir(tmp_path, template)
    tok, fmt = load_tokenizer(os.path.join(d, "tokenizer.json")), chat_format_for(d)
    text = fmt.render(CONVERSATION, add_generation_prompt=False)
    sample = chat_sample(fmt, CONVERSATION, tok, 256, "test")
    want = expected_spans(text, _replies(), lambda i: (lead, "<|endoftext|>"))
    assert masked_runs(tok, text, sample) == want
    assert [tok.decode([t]) for t, m in zip(sample["tokens"], sample["loss_mask"]) if m].count("<|endoftext|>") == 2
    assert int(sample["loss_mask"].sum()) < int((sample["tokens"] != tok.eod).sum())  # the rest is context


@needs("gguf", models=["smollm2-135m"])
def test_smollm2_template_and_tokenizer():
    d = os.path.join(named_models.local_checkpoint("smollm2-135m"), "tokenizer")
    tok, fmt = load_tokenizer(d), chat_format_for(d)
    assert fmt.eos_token == "<|im_end|>"
    for messages in (CONVERSATION, CONVERSATION[1:]):  # with a system message, and with the template's default one
        text = fmt.render(messages, add_generation_prompt=False)
        sample = chat_sample(fmt, messages, tok, 512, "test")
        assert masked_runs(tok, text, sample) == expected_spans(text, _replies(), lambda i: ("", "<|im_end|>"))


def test_rendering_spans_and_refusals(tmp_path):
    r = render(ChatFormat(), CONVERSATION[1:3], "x")
    assert r.text == "User: When do you open?\nAssistant: At nine, every day." and r.end_of_document
    assert r.spans == ((len("User: When do you open?\nAssistant:"), len(r.text)),)
    assert trained([(0, 2), (2, 2), (2, 5), (5, 9)], [(3, 6)]) == [0, 0, 1, 1]
    # a template that closes replies with something other than its end token cannot be trained on
    fmt = ChatFormat(CHATML.replace("eos_token", "'<|end|>'"), eos_token="<|endoftext|>", source="t")
    with pytest.raises(DataError, match="does not close assistant turn 2 with the end token"):
        render(fmt, CONVERSATION, "f.jsonl:3")
    # one that renders earlier turns differently once later ones exist (drops past replies) is refused
    forgetful = ("{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}{{ m['role'] + ': ' + "
                 "m['content'] + eos_token }}{% endif %}{% endfor %}")
    with pytest.raises(DataError, match="f.jsonl:3: the chat template .* turn by turn"):
        render(ChatFormat(forgetful, eos_token="</s>", source="t"), CONVERSATION, "f.jsonl:3")


def test_a_long_conversation_loses_its_end():
    tok = load_tokenizer(TOKENIZER)
    full = chat_sample(ChatFormat(), CONVERSATION, tok, 256, "x")
    cut = chat_sample(ChatFormat(), CONVERSATION, tok, 20, "x")
    assert len(cut["tokens"]) == 21 and cut["tokens"].tolist() == full["tokens"][:21].tolist()
    assert cut["loss_mask"].tolist() == full["loss_mask"][:21].tolist()
