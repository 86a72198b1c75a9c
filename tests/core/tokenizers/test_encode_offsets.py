"""``encode_offsets``: the ids of ``encode`` and each token's character span, for Hugging Face tokenizers and
SentencePiece models (whose byte offsets become character offsets, non-ASCII text included); a tokenizer
file brings its chat template and config into a checkpoint."""
from __future__ import annotations

import json
import os

from mwb.core.checkpoint.format import TOKENIZER_SIBLINGS, copy_extra
from mwb.core.tokenizers import load_tokenizer, train_tokenizer
from tests.helpers.checkpoints import TOKENIZER

TEXT = "User: Héllo café, the fox!\nAssistant: ça va<|endoftext|> ok"


def _check(tok, text):
    ids, spans = tok.encode_offsets(text)
    assert ids == tok.encode(text) and len(spans) == len(ids)
    assert all(0 <= a <= b <= len(text) for a, b in spans)
    assert [a for a, _ in spans] == sorted(a for a, _ in spans)  # in text order
    covered = set().union(*(range(a, b) for a, b in spans))
    assert {i for i, ch in enumerate(text) if not ch.isspace()} <= covered  # every visible character has a token
    return ids, spans


def test_huggingface_offsets():
    tok = load_tokenizer(TOKENIZER)
    ids, spans = _check(tok, TEXT)
    at = ids.index(tok.eod)
    assert TEXT[spans[at][0]: spans[at][1]] == "<|endoftext|>"


def test_sentencepiece_offsets_are_characters(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"the fox {i} jumps over the dog, café {i}"}) + "\n"
                              for i in range(200)))
    tok = load_tokenizer(train_tokenizer("sentencepiece", [str(corpus)], 300, str(tmp_path / "sp")))
    ids, spans = _check(tok, TEXT)
    # "é" (2 bytes in UTF-8) is one character: a piece ending after it ends at the next character, not beyond
    e = TEXT.index("é")
    assert any(a <= e < b for a, b in spans) and all(b <= len(TEXT) for _, b in spans)


def test_a_tokenizer_file_brings_its_chat_template(tmp_path):
    name = "tokenizer.json"
    src = tmp_path / "tok"
    src.mkdir()
    (src / name).write_text(open(TOKENIZER).read())
    (src / "chat_template.jinja").write_text("{{ messages }}")
    (src / "tokenizer_config.json").write_text("{}")
    (src / "unrelated.txt").write_text("x")
    rel = copy_extra(str(src / name), str(tmp_path / "ckpt" / "tokenizer"), TOKENIZER_SIBLINGS)
    assert rel == f"tokenizer/{name}"
    assert sorted(os.listdir(tmp_path / "ckpt" / "tokenizer")) == ["chat_template.jinja", name,
                                                                   "tokenizer_config.json"]
    copy_extra(str(src / "unrelated.txt"), str(tmp_path / "other"))  # another extra file brings nothing along
    assert os.listdir(tmp_path / "other") == ["unrelated.txt"]
