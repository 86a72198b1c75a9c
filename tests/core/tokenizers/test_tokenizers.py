"""Every tokenizer kind loads through ``load_tokenizer`` from tiny vocabularies written here, and exposes
the same interface (encode/decode, vocab size, special ids, sentinels)."""
from __future__ import annotations

import json
import os

import pytest

from mwb.core.errors import DataError
from mwb.core.tokenizers import Tokenizer, load_tokenizer, tokenizer_kind, train_tokenizer

TEXT = "the quick brown fox jumps over the lazy dog. The Dog sleeps!\n" * 40


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "c.txt").write_text(TEXT)
    (d / "c.jsonl").write_text("".join(json.dumps({"text": line}) + "\n" for line in TEXT.splitlines()))
    return d


def test_gpt2_vocab_and_merges(tmp_path):
    # byte-level alphabet: "Ġ" stands for a space
    vocab = {"<|endoftext|>": 0, "h": 1, "e": 2, "l": 3, "o": 4, "Ġ": 5, "w": 6, "r": 7, "d": 8,
             "he": 9, "ll": 10, "hell": 11, "Ġw": 12, "or": 13}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nh e\nl l\nhe ll\nĠ w\no r\n")
    for path in (tmp_path, tmp_path / "vocab.json", tmp_path / "merges.txt"):
        tok = load_tokenizer(str(path))
        assert tok.kind == "gpt2-bpe" and tok.vocab_size == 14 and tok.eod == 0
        assert tok.encode("hello world") == [11, 4, 12, 13, 3, 8]
        assert tok.decode(tok.encode("hello world<|endoftext|>")) == "hello world<|endoftext|>"
        assert tok.encode("<|endoftext|>") == [0]  # a special token is one id, not its characters
        assert tok.cls is None and tok.additional_special_tokens_ids == []


def test_wordpiece_vocab_cased_and_uncased(tmp_path):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "fox", "##es", "jump", "##ed", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = load_tokenizer(str(tmp_path / "vocab.txt"))
    assert tok.kind == "wordpiece" and tok.lowercase  # no upper-case entries: uncased
    assert (tok.pad, tok.unk, tok.cls, tok.sep, tok.mask, tok.eod) == (0, 1, 2, 3, 4, 3)
    assert tok.encode("The quick foxes jumped.") == [5, 6, 7, 8, 9, 10, 11]
    assert tok.encode("[MASK] fox") == [4, 7]
    assert tok.decode([5, 7, 8, 11]) == "the foxes."
    cased = tmp_path / "cased"
    cased.mkdir()
    (cased / "vocab.txt").write_text("\n".join(words + ["The"]) + "\n")
    tok = load_tokenizer(str(cased))
    assert not tok.lowercase and tok.encode("The the") == [12, 5]
    assert load_tokenizer(str(cased), lowercase=True).encode("The") == [5]


def test_trained_kinds_round_trip(corpus, tmp_path):
    for kind, size in (("bpe", 300), ("sentencepiece", 320), ("wordpiece", 120)):
        path = train_tokenizer(kind, [str(corpus / "c.jsonl")], size, str(tmp_path / kind), t5_sentinels=3)
        tok = load_tokenizer(path)
        assert isinstance(tok, Tokenizer) and tok.vocab_size <= size
        assert (tok.eod, tok.pad, tok.mask, tok.cls, tok.sep) == tuple(range(5)) or kind == "sentencepiece"
        names = ["<|endoftext|>", "[PAD]", "[MASK]", "[CLS]", "[SEP]"]
        assert [tok.eod, tok.pad, tok.mask, tok.cls, tok.sep] == [tok.token_to_id(t) for t in names]
        assert tok.sentinel_ids(3) == tok.additional_special_tokens_ids and len(tok.sentinel_ids(3)) == 3
        with pytest.raises(DataError, match="sentinel"):
            tok.sentinel_ids(4)
        text = "the lazy fox jumps."
        ids = tok.encode(text)
        assert tok.encode_batch([text, "dog"])[0] == ids
        if kind != "wordpiece":  # WordPiece normalises whitespace around punctuation
            assert tok.decode(ids) == text
        assert tok.encode("[SEP]")[-1:] == [tok.sep] and len(tok.encode("[SEP]")) <= 2  # SP may add a "▁" first
    assert tokenizer_kind(str(tmp_path / "bpe"))[0] == "huggingface"
    assert tokenizer_kind(str(tmp_path / "bpe" / "vocab.json"))[0] == "gpt2-bpe"
    assert tokenizer_kind(str(tmp_path / "wordpiece" / "vocab.txt"))[0] == "wordpiece"
    assert tokenizer_kind(str(tmp_path / "sentencepiece"))[0] == "sentencepiece"
    # the same BPE through its vocab.json + merges.txt gives the same ids
    a = load_tokenizer(str(tmp_path / "bpe" / "tokenizer.json"))
    b = load_tokenizer(str(tmp_path / "bpe" / "vocab.json"))
    assert a.encode("The quick dog sleeps!") == b.encode("The quick dog sleeps!")


def test_hf_directory_with_config(tmp_path, corpus):
    path = train_tokenizer("bpe", [str(corpus / "c.txt")], 300, str(tmp_path / "hf"))
    assert path == os.path.join(str(tmp_path / "hf"), "tokenizer.json")
    config = {"eos_token": "[SEP]", "bos_token": {"content": "[CLS]"}}
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(str(tmp_path / "hf"))
    assert tok.kind == "huggingface" and tok.eos == tok.sep and tok.bos == tok.cls and tok.eod == tok.sep


def test_errors(tmp_path):
    with pytest.raises(DataError, match="tokenizer not found"):
        load_tokenizer(str(tmp_path / "missing.json"))
    (tmp_path / "weird.bin").write_bytes(b"\0")
    with pytest.raises(DataError, match="cannot tell"):
        load_tokenizer(str(tmp_path / "weird.bin"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no tokenizer files"):
        load_tokenizer(str(tmp_path / "empty"))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(DataError, match="could not load huggingface tokenizer"):
        load_tokenizer(str(tmp_path / "broken.json"))
    with pytest.raises(DataError, match="unknown tokenizer type"):
        train_tokenizer("unigram", [str(tmp_path / "weird.bin")], 100, str(tmp_path / "o"))


def test_wordpiece_casing_read_from_config_or_ascii_capitals(tmp_path):
    from mwb.core.tokenizers.hf import vocab_is_cased
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    uncased = tmp_path / "uncased" / "vocab.txt"
    uncased.parent.mkdir()
    uncased.write_text("\n".join(specials + ["the", "cat", "ℝ", "##ℝ"]) + "\n", encoding="utf-8")
    assert not vocab_is_cased(str(uncased))  # 'ℝ' is upper-case to Python, but the vocabulary is uncased
    cased = tmp_path / "cased" / "vocab.txt"
    cased.parent.mkdir()
    cased.write_text("\n".join(specials + ["the", "Cat"]) + "\n", encoding="utf-8")
    assert vocab_is_cased(str(cased))
    (cased.parent / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    assert not vocab_is_cased(str(cased))  # the recorded setting wins
    tok = load_tokenizer(str(uncased))
    assert tok.encode("The CAT") == tok.encode("the cat")
