"""Tokenizers backed by Hugging Face ``tokenizers``: a ``tokenizer.json``, GPT-2 files, a BERT ``vocab.txt``.

Why build the GPT-2 and WordPiece pipelines here from ``tokenizers`` parts instead of using the library's
``ByteLevelBPETokenizer`` / ``BertWordPieceTokenizer`` wrappers: the wrappers add a post-processor that
inserts [CLS]/[SEP], and we want ``encode`` to return only the text's ids (the datasets add specials
themselves, as Megatron does). Special tokens found in the vocabulary are registered as *special* so a
literal ``<|endoftext|>`` or ``[MASK]`` in text maps to its single id instead of being split into pieces.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional, Sequence

from .base import SPECIAL_NAMES, Tokenizer, sentinel_token

# tokenizer_config.json key -> role
_CONFIG_ROLES = {
    "bos_token": "bos", "eos_token": "eos", "pad_token": "pad", "mask_token": "mask",
    "cls_token": "cls", "sep_token": "sep", "unk_token": "unk",
}


def _token_text(value) -> Optional[str]:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _config_overrides(directory: str) -> dict:
    """Role -> token from a HF ``tokenizer_config.json`` (so e.g. Llama-3's EOS is found by its name)."""
    path = os.path.join(directory, "tokenizer_config.json")
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for key, role in _CONFIG_ROLES.items():
        text = _token_text(cfg.get(key))
        if text:
            out[role] = text
    if "eos" in out:
        out.setdefault("eod", out["eos"])
    return out


class HFTokenizer(Tokenizer):
    """Wraps a ``tokenizers.Tokenizer`` object."""

    kind = "huggingface"

    def __init__(self, tok, path: str, kind: Optional[str] = None, overrides: Optional[dict] = None):
        # A tokenizer.json may carry padding/truncation (sentence-transformers exports pad and cut every text
        # to 128): mwb's data paths cut and pad themselves, so encode() must return the text's own ids.
        tok.no_padding()
        tok.no_truncation()
        self._tok = tok
        if kind:
            self.kind = kind
        self._register_specials()
        super().__init__(path, overrides)

    def _register_specials(self) -> None:
        vocab = self._tok.get_vocab(with_added_tokens=True)
        names = {n for names in SPECIAL_NAMES.values() for n in names}
        names.update(sentinel_token(i) for i in range(1000) if sentinel_token(i) in vocab)
        present = sorted((n for n in names if n in vocab), key=vocab.get)
        from tokenizers import AddedToken

        added = {t.content for t in self._tok.get_added_tokens_decoder().values()}
        todo = [AddedToken(n, special=True, normalized=False) for n in present if n not in added]
        if todo:
            self._tok.add_special_tokens(todo)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def _encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids, [tuple(o) for o in enc.offsets]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        fast = getattr(self._tok, "encode_batch_fast", None) or self._tok.encode_batch
        return [e.ids for e in fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> Optional[str]:
        return self._tok.id_to_token(int(i))


def from_tokenizer_json(path: str) -> HFTokenizer:
    from tokenizers import Tokenizer as _Tok

    overrides = _config_overrides(os.path.dirname(os.path.abspath(path)))
    return HFTokenizer(_Tok.from_file(path), path, "huggingface", overrides)


def from_gpt2_files(vocab: str, merges: str, path: str) -> HFTokenizer:
    """GPT-2 style byte-level BPE from ``vocab.json`` + ``merges.txt``."""
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, pre_tokenizers

    tok = _Tok(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return HFTokenizer(tok, path, "gpt2-bpe", _config_overrides(os.path.dirname(os.path.abspath(vocab))))


def vocab_is_cased(vocab: str) -> bool:
    """Whether a WordPiece ``vocab.txt`` is cased: the ``do_lower_case`` of a ``tokenizer_config.json`` beside
    it when there is one (Hugging Face's record of it), else whether any ordinary entry ([CLS] etc. excluded)
    has an ASCII capital. Only ASCII counts: uncased BERT vocabularies keep symbols such as 'ℝ' that Python
    calls upper-case, and lower-casing the input would then be skipped."""
    config = os.path.join(os.path.dirname(os.path.abspath(vocab)), "tokenizer_config.json")
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            lower = json.load(f).get("do_lower_case")
        if isinstance(lower, bool):
            return not lower
    with open(vocab, encoding="utf-8") as f:
        for line in f:
            t = line.rstrip("\n")
            if t.startswith("[") and t.endswith("]") or t.startswith("<") and t.endswith(">"):
                continue
            if any("A" <= c <= "Z" for c in t):
                return True
    return False


def from_wordpiece_vocab(vocab: str, path: str, lowercase: Optional[bool] = None) -> HFTokenizer:
    """BERT WordPiece from ``vocab.txt``; cased/uncased is read off the vocabulary unless given."""
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    if lowercase is None:
        lowercase = not vocab_is_cased(vocab)
    unk = "[UNK]"
    with open(vocab, encoding="utf-8") as f:
        if not any(line.rstrip("\n") == unk for line in f):
            unk = "<unk>"
    tok = _Tok(models.WordPiece.from_file(vocab, unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase or None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    out = HFTokenizer(tok, path, "wordpiece", _config_overrides(os.path.dirname(os.path.abspath(vocab))))
    out.lowercase = lowercase
    if out.eod is None:  # Megatron's BERT tokenizers use [SEP] as the end of a document
        out.eod = out.sep
    return out
