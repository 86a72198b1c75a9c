"""SentencePiece ``.model`` files behind the common :class:`~mwb.core.tokenizers.base.Tokenizer` interface.

SentencePiece maps any unknown piece to ``<unk>``'s id, so :meth:`token_to_id` checks the round trip to
tell "this token is in the vocabulary" from "this is the unknown id"; otherwise every missing special
token would look present.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from .base import Tokenizer


class SentencePieceTokenizer(Tokenizer):
    kind = "sentencepiece"

    def __init__(self, path: str):
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor(model_file=str(path))
        super().__init__(path)

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    def _encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._sp.encode(list(texts))

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """SentencePiece reports UTF-8 byte offsets: mapped to characters, a piece that starts or ends inside a
        character (byte fallback) covering that whole character."""
        try:
            proto = self._sp.encode(text, return_type="proto")
        except TypeError:  # sentencepiece before return_type
            proto = self._sp.encode(text, out_type="immutable_proto")
        char_of = [i for i, ch in enumerate(text) for _ in ch.encode("utf-8")]  # byte -> its character

        def start(b: int) -> int:
            return char_of[b] if b < len(char_of) else len(text)
        spans = [(start(p.begin), start(p.end) if p.end == p.begin else char_of[p.end - 1] + 1)
                 for p in proto.pieces]
        return [p.id for p in proto.pieces], spans

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.decode([int(i) for i in ids])

    def token_to_id(self, token: str) -> Optional[int]:
        i = self._sp.piece_to_id(token)
        if i < 0 or i >= self.vocab_size or self._sp.id_to_piece(i) != token:
            return None
        return int(i)

    def id_to_token(self, i: int) -> Optional[str]:
        return self._sp.id_to_piece(int(i)) if 0 <= int(i) < self.vocab_size else None
