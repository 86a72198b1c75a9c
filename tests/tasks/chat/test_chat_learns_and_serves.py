"""Acceptance: a tiny GPT fine-tuned with ``mwb finetune chat`` on 8 conversations (multi-turn among them) until
the loss on their replies is near zero answers each of them — its last reply, and an earlier reply from the
history before it — through ``/v1/chat/completions`` of the server ``mwb serve`` runs, in the chat format it was
trained in: a ChatML template carried by the checkpoint's tokenizer (with --pack), and the plain format."""
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.request

import pytest

from mwb.evaluation.chat_format import chat_format_for
from mwb.evaluation.loading import load_language_model
from mwb.evaluation.server import Limits, make_server
from mwb.tasks.chat.task import Chat
from tests.helpers.checkpoints import TOKENIZER, tiny_checkpoint

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + eos_token + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _conversations() -> list[dict]:
    """8 bundled conversations, 4 of them multi-turn, in their row form."""
    with open(os.path.join(Chat.default_data, "train.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    multi = [r for r in rows if len(r["messages"]) > 3][:4]
    single = [r for r in rows if len(r["messages"]) <= 3][:4]
    return multi + single


def _tokenizer(tmp_path, template: bool) -> str:
    if not template:
        return TOKENIZER
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(TOKENIZER, d / "tokenizer.json")
    (d / "chat_template.jinja").write_text(CHATML)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return str(d)


def _ask(base: str, messages: list[dict], plain: bool) -> str:
    """The served reply; in the plain format without the space that follows "Assistant:" (the format's
    separator, which the model writes as the first token of its reply)."""
    body = {"model": "chat", "messages": messages, "max_tokens": 48, "temperature": 0}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    text = out["choices"][0]["message"]["content"]
    return text.removeprefix(" ") if plain else text


@pytest.mark.parametrize("template,pack", [(True, True), (False, False)], ids=["chatml-template-packed", "plain"])
def test_learns_the_replies_and_serves_them(tmp_path, template, pack):
    tok = _tokenizer(tmp_path, template)
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=128, num_layers=2, hidden_size=128,
                           position_embedding="rope", tokenizer=tok)
    convs = _conversations()
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps(c) + "\n" for c in convs) * 16)  # fewer epoch ends
    (data / "dev.jsonl").write_text("".join(json.dumps(c) + "\n" for c in convs))
    out = str(tmp_path / "run")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "mwb", "finetune", "chat", "--checkpoint", ckpt, "--data", str(data),
                           "--epochs", "10", "--lr", "5e-3", "--keep-last", "1", "--set", "logging.progress=false",
                           "--set", "logging.tensorboard=false", "--out", out]
                          # packed: 4 rows of 256 tokens, about 3 conversations each, a step
                          + (["--pack", "--seq-length", "256", "--global-batch-size", "4", "--micro-batch-size", "4"]
                             if pack else
                             ["--seq-length", "128", "--global-batch-size", "8", "--micro-batch-size", "8"]),
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.load(open(os.path.join(out, "results.json")))
    assert results["metrics"]["dev_loss"] < 0.05, results["metrics"]  # the replies are learned
    assert results["metrics"]["exact_match"] == 1.0, results["metrics"]

    _, lm = load_language_model(results["best_checkpoint"], device="cpu")
    fmt = chat_format_for(lm.tokenizer.path)  # what `mwb serve` does: the run's tokenizer carries its format
    assert (fmt.template is not None) == template
    server = make_server(lm, "127.0.0.1", 0, model_name="chat", limits=Limits(max_tokens=64), quiet=True,
                         chat_format=fmt)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://%s:%d" % server.server_address[:2]
    try:
        for conv in convs:
            messages = conv["messages"]
            assert _ask(base, messages[:-1], not template) == messages[-1]["content"]
            if len(messages) > 3:  # an earlier turn: the history up to its first reply
                first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
                assert _ask(base, messages[:first], not template) == messages[first]["content"]
    finally:
        server.shutdown()
        server.server_close()
