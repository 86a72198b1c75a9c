"""The one tokenizer interface every data path uses, whatever library backs it.

Why one class: datasets need the same handful of facts from any tokenizer (vocabulary size, the end-of-
document id for GPT, [CLS]/[SEP]/[MASK]/[PAD] for BERT, sentinels for T5), and code that asks
``tok.sep`` should not care whether the vocabulary came from SentencePiece or ``tokenizers``. Special ids
are found by name in the vocabulary (see :data:`SPECIAL_NAMES`); an id a tokenizer lacks is ``None``, and
:meth:`Tokenizer.require` turns a missing one into a :class:`~mwb.core.errors.DataError` naming it.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from mwb.core.errors import DataError

# The special tokens ``train_tokenizer`` adds, in id order (ids 0..4 in a trained vocabulary).
EOD_TOKEN = "<|endoftext|>"
PAD_TOKEN = "[PAD]"
MASK_TOKEN = "[MASK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
SPECIAL_TOKENS = [EOD_TOKEN, PAD_TOKEN, MASK_TOKEN, CLS_TOKEN, SEP_TOKEN]


def sentinel_token(i: int) -> str:
    """T5's name for the i-th sentinel (``<extra_id_0>`` replaces the first masked span)."""
    return f"<extra_id_{i}>"


# role -> names tried in order; covers GPT-2, BERT, T5, Llama-style and mwb-trained vocabularies.
SPECIAL_NAMES = {
    "eod": [EOD_TOKEN, "</s>", "<|end_of_text|>", "<eos>", "[EOS]", "<|im_end|>"],
    "pad": [PAD_TOKEN, "<pad>", "<|pad|>", "<PAD>"],
    "mask": [MASK_TOKEN, "<mask>", "<MASK>"],
    "cls": [CLS_TOKEN, "<cls>", "<CLS>"],
    "sep": [SEP_TOKEN, "<sep>", "<SEP>"],
    "bos": ["<s>", "[BOS]", "<|begin_of_text|>", "<bos>", "<|startoftext|>"],
    "eos": ["</s>", "[EOS]", "<eos>", EOD_TOKEN, "<|end_of_text|>"],
    "unk": ["[UNK]", "<unk>", "<UNK>", "<|unk|>"],
}
ROLES = tuple(SPECIAL_NAMES)


class Tokenizer:
    """Text ↔ ids, plus the special ids the datasets need.

    Subclasses implement :meth:`_encode`, :meth:`decode`, :meth:`token_to_id` and ``vocab_size``; this
    base class finds the special ids once, in ``__init__`` via :meth:`_find_specials`.

    Attributes: ``kind`` (``"sentencepiece"``, ``"huggingface"``, ``"gpt2-bpe"``, ``"wordpiece"``),
    ``path`` (what :func:`~mwb.core.tokenizers.load_tokenizer` was given), and the ids ``eod``, ``pad``,
    ``mask``, ``cls``, ``sep``, ``bos``, ``eos``, ``unk`` (each ``int`` or ``None``).
    """

    kind = "abstract"

    def __init__(self, path: str, overrides: Optional[dict] = None):
        self.path = str(path)
        self.eod = self.pad = self.mask = self.cls = self.sep = None
        self.bos = self.eos = self.unk = None
        self._find_specials(overrides or {})

    # --- what subclasses provide -------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        """Ids back to text; special tokens are kept (so an EOD in the stream stays visible)."""
        raise NotImplementedError

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of ``token`` if it is a single entry of the vocabulary, else ``None``."""
        raise NotImplementedError

    def id_to_token(self, i: int) -> Optional[str]:
        raise NotImplementedError

    # --- shared behaviour --------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Text to ids, with no [CLS]/[SEP]/BOS/EOS added: the datasets add what each model needs."""
        return self._encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many texts at once; backends with a native batch path override this (it is the hot loop)."""
        return [self._encode(t) for t in texts]

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of ``text`` (as :meth:`encode`) and each token's character span ``(start, end)`` in ``text``:
        what a loss mask over parts of a text (chat fine-tuning's assistant turns) is computed from. Hugging
        Face and SentencePiece tokenizers have them; a backend without offsets says so."""
        raise DataError(f"tokenizer {self.path} ({self.kind}) gives no character offsets, which a loss mask over "
                        f"parts of a text needs; use a Hugging Face tokenizer.json or a SentencePiece model")

    def _find_specials(self, overrides: dict) -> None:
        """Set the role ids from ``overrides`` (role -> token string) first, then the usual names."""
        for role in ROLES:
            names = ([overrides[role]] if overrides.get(role) else []) + SPECIAL_NAMES[role]
            for name in names:
                i = self.token_to_id(name)
                if i is not None:
                    setattr(self, role, int(i))
                    break

    @property
    def additional_special_tokens_ids(self) -> list[int]:
        """The T5 sentinel ids ``<extra_id_0>``, ``<extra_id_1>``, … that the vocabulary has, in order."""
        out = []
        while True:
            i = self.token_to_id(sentinel_token(len(out)))
            if i is None:
                return out
            out.append(int(i))

    def sentinel_ids(self, n: int) -> list[int]:
        """The first ``n`` sentinel ids; a DataError if the vocabulary has fewer (T5 needs one per span)."""
        out = []
        for k in range(n):
            i = self.token_to_id(sentinel_token(k))
            if i is None:
                raise DataError(
                    f"tokenizer {self.path} has {k} T5 sentinel tokens (<extra_id_N>) but {n} are needed; "
                    f"train one with `mwb tokenizer train --t5 ...` or use a T5 tokenizer"
                )
            out.append(int(i))
        return out

    def require(self, *roles: str, purpose: str = "this model") -> None:
        """Raise a DataError naming every role in ``roles`` whose id this tokenizer lacks."""
        missing = [r for r in roles if getattr(self, r) is None]
        if missing:
            wanted = ", ".join(f"{r} ({SPECIAL_NAMES[r][0]})" for r in missing)
            raise DataError(
                f"tokenizer {self.path} has no {wanted} token, which {purpose} needs; train one with "
                f"`mwb tokenizer train` (it adds {', '.join(SPECIAL_TOKENS)}) or pick a tokenizer that has it"
            )

    def __repr__(self) -> str:
        specials = ", ".join(f"{r}={getattr(self, r)}" for r in ROLES if getattr(self, r) is not None)
        return f"{type(self).__name__}({self.path!r}, vocab_size={self.vocab_size}, {specials})"
