"""``train_tokenizer``: a local tokenizer from local text, with the special tokens mwb's models need.

Every trained vocabulary starts with the same special tokens, in this order: ``<|endoftext|>`` (GPT's
end of document), ``[PAD]``, ``[MASK]``, ``[CLS]``, ``[SEP]``, then (``t5_sentinels=N``) ``<extra_id_0>`` …
``<extra_id_{N-1}>``. So one tokenizer can serve GPT, BERT and T5 alike, and the ids of the specials do
not depend on the corpus. Inputs are anything :func:`mwb.core.data.readers.iter_texts` reads (text,
JSONL, parquet, …), so a tokenizer can be trained on the very files that will be preprocessed.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

from mwb.core.errors import DataError

from .base import SPECIAL_TOKENS, sentinel_token

KINDS = ("sentencepiece", "bpe", "wordpiece")


def special_tokens(t5_sentinels: int = 0) -> list[str]:
    return SPECIAL_TOKENS + [sentinel_token(i) for i in range(t5_sentinels)]


def _lines(texts: Iterable[str], max_chars: int = 4000) -> Iterable[str]:
    """SentencePiece trains on sentences of bounded length: feed it lines, long ones cut."""
    for text in texts:
        for line in text.split("\n"):
            line = line.strip()
            while line:
                yield line[:max_chars]
                line = line[max_chars:]


def train_tokenizer(
    kind: str,
    inputs: Sequence[str],
    vocab_size: int,
    out_dir: str,
    *,
    t5_sentinels: int = 0,
    json_keys: Sequence[str] = ("text",),
    lowercase: bool = False,
    text_docs: str = "line",
) -> str:
    """Train a ``kind`` tokenizer (``sentencepiece``, ``bpe`` = byte-level BPE, ``wordpiece``) on ``inputs``.

    Writes into ``out_dir`` and returns the path to hand to ``load_tokenizer``: ``out_dir/tokenizer.json``
    for bpe (``vocab.json`` + ``merges.txt`` are written too), ``out_dir`` for wordpiece (``tokenizer.json``
    + ``vocab.txt``), ``out_dir/tokenizer.model`` for sentencepiece. ``t5_sentinels=100`` adds T5's
    sentinels; ``lowercase`` applies to wordpiece only.
    """
    from mwb.core.data.readers import iter_texts

    if kind not in KINDS:
        raise DataError(f"unknown tokenizer type {kind!r}; choose one of {', '.join(KINDS)}")
    specials = special_tokens(t5_sentinels)
    byte_pieces = 0 if kind == "wordpiece" else 256  # byte-level BPE's alphabet / SentencePiece byte fallback
    if vocab_size <= len(specials) + byte_pieces:
        raise DataError(f"vocab size {vocab_size} is too small for {len(specials)} special tokens"
                        + (f" plus {byte_pieces} byte tokens" if byte_pieces else ""))
    if not inputs:
        raise DataError("no input files to train the tokenizer on")
    os.makedirs(out_dir, exist_ok=True)
    texts = iter_texts(list(inputs), json_keys, text_docs)

    if kind == "sentencepiece":
        import sentencepiece as spm

        prefix = os.path.join(out_dir, "tokenizer")
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(_lines(texts)), model_prefix=prefix, vocab_size=vocab_size,
                model_type="unigram", user_defined_symbols=specials, byte_fallback=True,
                character_coverage=1.0, hard_vocab_limit=False, bos_id=-1, eos_id=-1, unk_id=0,
                minloglevel=2, num_threads=1,
            )
        except RuntimeError as e:
            raise DataError(f"sentencepiece training failed: {e}") from e
        return prefix + ".model"

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=2, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase or None)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=2, special_tokens=specials + ["[UNK]"], show_progress=False,
        )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    tok.model.save(out_dir)  # vocab.json + merges.txt (bpe) or vocab.txt (wordpiece)
    return os.path.join(out_dir, "tokenizer.json") if kind == "bpe" else out_dir
