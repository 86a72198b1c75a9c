"""``load_tokenizer(path)``: one ``--tokenizer`` flag for every kind of vocabulary, kind read off the path.

Rules (INTERFACE.md): a ``tokenizer.json`` (any ``*.json`` that is not ``vocab.json``) or a directory holding
one is a Hugging Face tokenizer; a ``*.model`` file (or a directory with ``tokenizer.model`` /
``spiece.model`` / a single ``*.model``) is SentencePiece; a directory (or its ``vocab.json`` /
``merges.txt``) with both ``vocab.json`` and ``merges.txt`` is GPT-2 byte-level BPE; a ``vocab.txt`` (or a
directory with one) is BERT WordPiece. In a directory the first rule that matches wins, in that order.
A tiktoken ranks file (``*.tiktoken``) is byte-level BPE converted to a ``tokenizer.json`` once; the name
``gpt2`` is GPT-2's ranks file found as :mod:`.tiktoken_bpe` describes (an existing path called ``gpt2``
wins). :func:`tokenizer_identity` names a tokenizer by the content of its files, for cache keys of data
tokenized with it.
"""
from __future__ import annotations

import glob
import os
from typing import Optional

from mwb.core.data.cache import digest, file_digest
from mwb.core.errors import DataError

from . import tiktoken_bpe
from .base import Tokenizer

_ACCEPTED = (
    "a tokenizer.json or a Hugging Face tokenizer directory, a SentencePiece .model, a WordPiece vocab.txt, "
    "a directory with GPT-2 vocab.json + merges.txt, a tiktoken .tiktoken file, or gpt2"
)


def tokenizer_location(path):
    """The files ``path`` stands for: the cached GPT-2 tokenizer directory for the name ``gpt2``, else
    ``path`` itself (what a run stores with its checkpoints must be a real file or directory)."""
    if isinstance(path, str) and path == tiktoken_bpe.GPT2_NAME and not os.path.exists(path):
        return tiktoken_bpe.gpt2_tokenizer_dir()
    return path


def tokenizer_kind(path: str) -> tuple[str, dict]:
    """(kind, files) for ``path``; kind is ``huggingface``, ``sentencepiece``, ``gpt2-bpe`` or ``wordpiece``."""
    p = os.path.abspath(os.path.expanduser(str(tokenizer_location(path))))
    if not os.path.exists(p):
        raise DataError(f"tokenizer not found: {path} (give {_ACCEPTED})")
    if os.path.isfile(p):
        name = os.path.basename(p)
        d = os.path.dirname(p)
        if name in ("vocab.json", "merges.txt"):
            vocab, merges = os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")
            if os.path.isfile(vocab) and os.path.isfile(merges):
                return "gpt2-bpe", {"vocab": vocab, "merges": merges}
            raise DataError(f"{path}: a GPT-2 tokenizer needs both vocab.json and merges.txt in {d}")
        if name.endswith(".json"):
            return "huggingface", {"file": p}
        if name.endswith(".model"):
            return "sentencepiece", {"file": p}
        if name.endswith(".tiktoken"):
            return "huggingface", {"file": os.path.join(tiktoken_bpe.tokenizer_dir(p), "tokenizer.json")}
        if name.endswith(".txt"):
            return "wordpiece", {"vocab": p}
        raise DataError(f"cannot tell what kind of tokenizer {path} is (give {_ACCEPTED})")
    j = lambda n: os.path.join(p, n)  # noqa: E731
    if os.path.isfile(j("tokenizer.json")):
        return "huggingface", {"file": j("tokenizer.json")}
    for n in ("tokenizer.model", "spiece.model", "sentencepiece.model"):
        if os.path.isfile(j(n)):
            return "sentencepiece", {"file": j(n)}
    models = sorted(glob.glob(j("*.model")))
    if len(models) == 1:
        return "sentencepiece", {"file": models[0]}
    if os.path.isfile(j("vocab.json")) and os.path.isfile(j("merges.txt")):
        return "gpt2-bpe", {"vocab": j("vocab.json"), "merges": j("merges.txt")}
    if os.path.isfile(j("vocab.txt")):
        return "wordpiece", {"vocab": j("vocab.txt")}
    raise DataError(f"no tokenizer files in directory {path} (expected {_ACCEPTED})")


# files beside a tokenizer that change what it does (special-token roles, lower-casing)
_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def tokenizer_identity(path) -> str:
    """A hash of the content of every file the tokenizer at ``path`` is read from (and of the side files
    beside them that change its behaviour). Why content, not the path: data tokenized with one tokenizer
    must never be reused for another, and the same files under another path are the same tokenizer."""
    kind, files = tokenizer_kind(path)
    parts = {role: file_digest(f) for role, f in files.items()}
    for d in sorted({os.path.dirname(f) for f in files.values()}):
        for name in _SIDE_FILES:
            if os.path.isfile(os.path.join(d, name)):
                parts[f"{os.path.basename(d)}/{name}"] = file_digest(os.path.join(d, name))
    return digest({"kind": kind, "files": parts})


def load_tokenizer(path, lowercase: Optional[bool] = None) -> Tokenizer:
    """Load the tokenizer at ``path`` (kind inferred, see the module docstring).

    ``lowercase`` only matters for WordPiece and overrides the cased/uncased guess from the vocabulary.
    Raises DataError for a missing path, an unknown layout or files the backend cannot read.
    """
    if isinstance(path, Tokenizer):
        return path
    kind, files = tokenizer_kind(path)
    try:
        if kind == "huggingface":
            from .hf import from_tokenizer_json

            return from_tokenizer_json(files["file"])
        if kind == "sentencepiece":
            from .sp import SentencePieceTokenizer

            return SentencePieceTokenizer(files["file"])
        if kind == "gpt2-bpe":
            from .hf import from_gpt2_files

            return from_gpt2_files(files["vocab"], files["merges"], str(path))
        from .hf import from_wordpiece_vocab

        return from_wordpiece_vocab(files["vocab"], str(path), lowercase)
    except DataError:
        raise
    except Exception as e:  # backend parse errors: name the file and the kind we tried
        raise DataError(f"could not load {kind} tokenizer from {path}: {e}") from e
