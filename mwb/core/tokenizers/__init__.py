"""Tokenizers: one interface (:class:`Tokenizer`) over SentencePiece, HF ``tokenizers``, GPT-2 and WordPiece.

``load_tokenizer(path)`` picks the kind from the path; ``train_tokenizer(kind, inputs, vocab_size,
out_dir)`` trains one locally with mwb's special tokens. See ``docs/data.md``.
"""
from .base import SPECIAL_TOKENS, Tokenizer, sentinel_token
from .loader import load_tokenizer, tokenizer_kind
from .train import train_tokenizer

__all__ = ["SPECIAL_TOKENS", "Tokenizer", "load_tokenizer", "sentinel_token", "tokenizer_kind", "train_tokenizer"]
