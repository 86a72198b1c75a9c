"""`mwb pretrain gpt --tokenizer gpt2` without --data trains on the bundled corpus tokenized by GPT-2's BPE:
the cached data holds GPT-2 ids (beyond the bundled 8k vocabulary), the first document's ids are tiktoken's
encoding of its sentences built from the same ranks file, and the model's vocabulary is GPT-2's."""
import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

from mwb.core.data.bundled import corpus_file
from mwb.core.data.indexed import IndexedDataset
from mwb.core.data.sentences import split_sentences
from mwb.core.errors import DataError
from mwb.core.tokenizers import tiktoken_bpe
from tests.helpers.needs import needs

# GPT-2's pre-tokenisation regex (tiktoken's "gpt2" encoding), written out so the reference needs no download
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
TINY = ["--set", "model.num_layers=2", "--set", "model.hidden_size=64", "--set", "model.num_attention_heads=4",
        "--set", "model.dropout=0", "--seed", "1", "--seq-length", "32", "--global-batch-size", "2",
        "--micro-batch-size", "2", "--eval-interval", "0", "--eval-steps", "1"]


def _ranks():
    try:
        return tiktoken_bpe.find_gpt2_ranks()
    except DataError:
        return None


RANKS = _ranks()


@needs("tiktoken", data=["gpt2-ranks"])
def test_pretrain_gpt2_tokenizer_trains_on_gpt2_ids_of_bundled_corpus(tmp_path):
    tiktoken = pytest.importorskip("tiktoken")
    out = str(tmp_path / "run")
    proc = subprocess.run([sys.executable, "-m", "mwb", "pretrain", "gpt", "--tokenizer", "gpt2", "--steps", "2",
                           "--out", out, *TINY], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(r"tokenized bundled corpus[^:]*: (\S+)", proc.stderr)
    assert found, proc.stderr[-3000:]
    data = IndexedDataset(os.path.join(found.group(1), "shakespeare_text_sentence"))
    assert data.num_documents == 2228
    assert int(np.fromfile(data.prefix + ".bin", dtype=data.dtype).max()) > 8191

    ref = tiktoken.Encoding("gpt2-file", pat_str=GPT2_PATTERN, mergeable_ranks=tiktoken_bpe.read_ranks(RANKS),
                            special_tokens={"<|endoftext|>": 50256})
    with gzip.open(corpus_file(), "rt", encoding="utf-8") as f:
        text = json.loads(f.readline())["text"]
    want = [i for s in split_sentences(text) for i in ref.encode(s, disallowed_special=())] + [50256]
    assert data.document(0).tolist() == want

    with open(os.path.join(out, "config.yaml")) as f:
        derived = yaml.safe_load(f)["derived"]
    assert derived["vocab_size"] == 50257
    with open(os.path.join(out, "metrics.jsonl")) as f:
        first = json.loads(f.readline())
    assert abs(first["loss"] - np.log(50257)) < 0.5  # an untrained model over GPT-2's vocabulary, not 8k
