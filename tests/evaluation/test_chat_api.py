"""``/v1/chat/completions`` answered to the official ``openai`` client (non-streaming and streaming) on a free
127.0.0.1 port, checked against :func:`generate` on the prompt the chat format renders; chat templates
rendered as ``transformers`` renders them."""
import json
import os
import threading

import pytest

from mwb.core import named_models
from mwb.evaluation.chat_format import PLAIN_STOPS, ChatFormat, chat_format_for
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.server import Limits, make_server
from tests.helpers.needs import needs

pytestmark = needs("openai")
openai = pytest.importorskip("openai")

MESSAGES = [{"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "The baker"}]
# a ChatML-style template written by this test (as a tokenizer directory would carry it)
TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + eos_token + '\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _serve(lm, chat_format):
    server = make_server(lm, "127.0.0.1", 0, model_name="tiny", limits=Limits(max_tokens=64, max_prompts=4),
                         quiet=True, chat_format=chat_format)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def plain(eval_lm):
    server, client = _serve(eval_lm, ChatFormat())
    yield client
    server.shutdown()
    server.server_close()


def _want(lm, fmt, max_tokens, stop=(), **kw):
    params = SamplingParams(max_tokens=max_tokens, temperature=0, stop=tuple(fmt.stops) + tuple(stop), **kw)
    return generate(lm, [fmt.render(MESSAGES)], params)[0]


def test_plain_format_non_streaming_equals_generate(plain, eval_lm):
    out = plain.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=0)
    want = _want(eval_lm, ChatFormat(), 12)
    assert ChatFormat().render(MESSAGES) == "System: You answer briefly.\nUser: The baker\nAssistant:"
    assert out.object == "chat.completion" and out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == want.text and out.choices[0].finish_reason == want.finish_reason
    assert out.usage.prompt_tokens == len(want.prompt_tokens) and out.usage.completion_tokens == len(want.tokens)


def test_streaming_deltas_add_up_to_the_completion(plain, eval_lm):
    full = _want(eval_lm, ChatFormat(), 20)
    chunks = list(plain.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=20, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([d for d in deltas if d]) > 1  # really streamed, not one block
    assert "".join(deltas) == full.text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == full.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(full.tokens)


def test_streaming_never_sends_text_a_stop_string_removes(plain, eval_lm):
    text = _want(eval_lm, ChatFormat(), 20).text
    stop = text[len(text) // 2: len(text) // 2 + 3]  # a stop string inside the greedy reply
    assert stop.strip()
    want = _want(eval_lm, ChatFormat(), 20, stop=(stop,))
    stream = plain.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=20, temperature=0,
                                           stop=stop, stream=True)
    got = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert got == want.text == text[: text.find(stop)]


def test_n_samples_stream_per_index_and_seeded(plain, eval_lm):
    kw = dict(model="tiny", messages=MESSAGES, max_tokens=8, temperature=1.0, n=2, seed=7)
    whole = plain.chat.completions.create(**kw)
    parts = {0: "", 1: ""}
    for c in plain.chat.completions.create(stream=True, **kw):
        for ch in c.choices:
            parts[ch.index] += ch.delta.content or ""
    params = SamplingParams(max_tokens=8, temperature=1.0, n=2, seed=7, stop=PLAIN_STOPS)
    want = generate(eval_lm, [ChatFormat().render(MESSAGES)], params)
    assert [c.message.content for c in whole.choices] == [g.text for g in want] == [parts[0], parts[1]]


def test_bad_chat_requests_are_400(plain):
    for bad in ({"messages": []}, {"messages": [{"role": "robot", "content": "x"}]},
                {"messages": [{"role": "user", "content": 5}]}, {"messages": MESSAGES, "max_tokens": 10 ** 6},
                {"messages": MESSAGES, "stream": "yes"}):
        with pytest.raises(openai.BadRequestError):
            plain.chat.completions.create(model="tiny", **bad)


def test_template_from_tokenizer_dir_stops_at_its_end_token(tmp_path, eval_lm, eval_tokenizer_path):
    tok_dir = os.path.dirname(eval_tokenizer_path) if os.path.isfile(eval_tokenizer_path) else eval_tokenizer_path
    d = tmp_path / "tok"
    d.mkdir()
    for name in os.listdir(tok_dir):
        (d / name).write_bytes(open(os.path.join(tok_dir, name), "rb").read())
    (d / "chat_template.jinja").write_text(TEMPLATE)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    fmt = chat_format_for(str(d))
    assert fmt.source.endswith("chat_template.jinja") and fmt.stops == ("<|endoftext|>",)
    assert fmt.render(MESSAGES) == ("<|im_start|>system\nYou answer briefly.<|endoftext|>\n<|im_start|>user\n"
                                    "The baker<|endoftext|>\n<|im_start|>assistant\n")
    server, client = _serve(eval_lm, fmt)
    try:
        out = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=10, temperature=0)
        assert out.choices[0].message.content == _want(eval_lm, fmt, 10).text
    finally:
        server.shutdown()
        server.server_close()
    assert chat_format_for(str(tmp_path / "nothing-here")).template is None


@needs("gguf", models=["smollm2-135m"])
def test_smollm2_template_kept_at_conversion_renders_like_transformers():
    from transformers import AutoTokenizer

    ckpt = named_models.local_checkpoint("smollm2-135m")
    tok_dir = os.path.join(ckpt, "tokenizer")
    fmt = chat_format_for(tok_dir)
    assert fmt.template is not None and fmt.stops == ("<|im_end|>",)
    hf = AutoTokenizer.from_pretrained(tok_dir)
    for msgs in (MESSAGES[1:], MESSAGES, MESSAGES + [{"role": "assistant", "content": "bakes."},
                                                      {"role": "user", "content": "And then?"}]):
        assert fmt.render(msgs) == hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


@needs("gguf", models=["smollm2-135m"])
def test_smollm2_chat_through_the_openai_client():
    from mwb.evaluation.loading import load_language_model
    _, lm = load_language_model("smollm2-135m", device="cpu")
    fmt = chat_format_for(lm.tokenizer.path)
    server, client = _serve(lm, fmt)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    try:
        out = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0)
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="tiny", messages=msgs, max_tokens=12, temperature=0, stream=True) if c.choices)
    finally:
        server.shutdown()
        server.server_close()
    want = generate(lm, [fmt.render(msgs)], SamplingParams(max_tokens=12, temperature=0, stop=fmt.stops))[0]
    assert out.choices[0].message.content == want.text == streamed
    assert "Paris" in want.text and "<|im" not in want.text
