"""GPT-2's tokenizer from a tiktoken ranks file (``gpt2.tiktoken``), as an ordinary mwb tokenizer.

Why convert instead of calling tiktoken: mwb tokenizers are Hugging Face ``tokenizers`` objects (fast batch
encoding, one ``tokenizer.json`` stored with checkpoints), and a tiktoken ranks file is the same byte-level
BPE written differently: each line is a token's bytes (base64) and its rank, and merging the adjacent pair
whose concatenation has the lowest rank is the whole algorithm. So the vocabulary is the ranks under
GPT-2's byte → printable-character mapping, and the merges are every split of a token into two tokens,
in the order of the merged token's rank. The GPT-2 ranks file (50,256 ranks + ``<|endoftext|>`` = 50256)
ships in the ``openai-whisper`` sdist; :func:`find_gpt2_ranks` states where mwb looks for it.

``--tokenizer gpt2`` reads the ranks that ``mwb data fetch gpt2-ranks`` provides, found by the one resolver of
package data (:func:`mwb.core.data.package_files.package_path`: an installed ``openai-whisper``, else its
sdist in ``$MWB_CACHE/packages``, ``$MWB_CACHE`` or the current directory, extracted once). ``--tokenizer
PATH.tiktoken`` uses that file. The converted ``tokenizer.json`` is cached by the file's hash.
"""
from __future__ import annotations

import base64
import json
import os
import shutil

from mwb.core.data.cache import cache_root, cached_dir, file_digest
from mwb.core.data.package_files import package_path
from mwb.core.errors import DataError

GPT2_NAME = "gpt2"
GPT2_FILE = "gpt2.tiktoken"
ENDOFTEXT = "<|endoftext|>"
_GPT2_RANKS = 50256  # a ranks file this long is GPT-2's (r50k), whose only special token follows it
GPT2_SOURCE = "gpt2-ranks"  # its name in mwb.core.data.package_files.SOURCES
HOW_TO_GET = (f"--tokenizer gpt2 needs GPT-2's ranks file {GPT2_FILE}: run `mwb data fetch {GPT2_SOURCE}`, or pass "
              f"--tokenizer /path/to/{GPT2_FILE}")


def read_ranks(path: str) -> dict[bytes, int]:
    """{token bytes: rank} of a tiktoken ranks file."""
    ranks = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
            except ValueError:
                raise DataError(f"{path}:{n}: not a tiktoken ranks line (base64 token, space, rank)") from None
    return ranks


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the others
    (control characters, space, ...) take the code points from 256 upwards, in byte order."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The byte-level BPE vocabulary and merge list equivalent to ``ranks``."""
    sym = byte_symbols()
    text = {tok: "".join(sym[b] for b in tok) for tok in ranks}
    vocab = {text[tok]: rank for tok, rank in ranks.items()}
    merges = []
    for tok, rank in ranks.items():
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], text[left], text[right]))
    merges.sort()
    return vocab, [(a, b) for *_, a, b in merges]


def build_tokenizer_json(ranks_file: str, out_dir: str) -> None:
    """Write ``tokenizer.json`` (and the ranks file itself) for ``ranks_file`` into ``out_dir``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    ranks = read_ranks(ranks_file)
    vocab, merges = vocab_and_merges(ranks)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    config = {}
    if len(ranks) == _GPT2_RANKS:
        tok.add_special_tokens([AddedToken(ENDOFTEXT, special=True, normalized=False)])
        config = {"bos_token": ENDOFTEXT, "eos_token": ENDOFTEXT, "unk_token": ENDOFTEXT}
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    shutil.copy2(ranks_file, os.path.join(out_dir, os.path.basename(ranks_file)))


def tokenizer_dir(ranks_file: str) -> str:
    """The cached directory holding the converted ``tokenizer.json`` of ``ranks_file``."""
    name = f"tiktoken-{file_digest(ranks_file)[:16]}"
    path, _ = cached_dir(os.path.join(cache_root(), "tokenizers"), name,
                         lambda tmp: build_tokenizer_json(ranks_file, tmp), f"tokenizer {os.path.basename(ranks_file)}")
    return path


def find_gpt2_ranks() -> str:
    """Where ``--tokenizer gpt2`` reads GPT-2's ranks from: the package-data resolver's ``gpt2-ranks``."""
    try:
        return package_path(GPT2_SOURCE)
    except DataError as e:
        raise DataError(f"--tokenizer gpt2: {e}; or pass --tokenizer /path/to/{GPT2_FILE}") from None


def gpt2_tokenizer_dir() -> str:
    """The directory ``--tokenizer gpt2`` stands for (a Hugging Face tokenizer directory in the cache)."""
    return tokenizer_dir(find_gpt2_ranks())
