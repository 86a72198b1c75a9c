"""``train_tokenizer``: a local tokenizer from local text, with the special tokens mwb's models need.

Every trained vocabulary starts with the same special tokens, in this order: ``<|endoftext|>`` (GPT's
end of document), ``[PAD]``, ``[MASK]``, ``[CLS]``, ``[SEP]``, then (``t5_sentinels=N``) ``<extra_id_0>`` …
``<extra_id_{N-1}>``. So one tokenizer can serve GPT, BERT and T5 alike, and the ids of the specials do
not depend on the corpus. Inputs are anything :func:`mwb.core.data.readers.iter_texts` reads (text,
JSONL, parquet, …), so a tokenizer can be trained on the very files that will be preprocessed.
"""
from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence

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


def first_words(texts: Iterable[str], max_words: int) -> Iterable[str]:
    """The texts up to their first ``max_words`` whitespace-separated words, the text that crosses the limit
    cut there: vocabularies learned from different corpora can see the same amount of text."""
    left = max_words
    for text in texts:
        if left <= 0:
            return
        words = text.split()
        if len(words) > left:
            yield " ".join(words[:left])
            return
        left -= len(words)
        yield text


def _canonical_wordpiece(tok, first: Sequence[str]):
    """The trained WordPiece with ``first`` (the special tokens, in order) at ids 0.. and every other entry
    after them in sorted order. Why: the trainer lays out its initial alphabet in hash order, so the same text
    gives the same entries under different ids from one run to the next (and the same seed then initialises
    a different model); WordPiece's greedy longest match depends only on the set of entries, so sorting
    changes no segmentation and makes the ids a function of the entries. The set itself can still differ in
    a few of the last, equal-count entries between runs (the trainer breaks those ties by the hash-ordered
    ids: 2 of 10 runs on 195k words of Wikipedia at 8,000 entries, by 2-4 entries)."""
    from tokenizers import models

    vocab = tok.get_vocab(with_added_tokens=False)
    if [vocab.get(t) for t in first] != list(range(len(first))):
        raise DataError("WordPiece training did not put the special tokens first")  # the trainer's contract
    order = list(first) + sorted(set(vocab) - set(first))
    tok.model = models.WordPiece({t: i for i, t in enumerate(order)}, unk_token="[UNK]")
    return tok


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
    max_words: Optional[int] = None,
) -> str:
    """Train a ``kind`` tokenizer (``sentencepiece``, ``bpe`` = byte-level BPE, ``wordpiece``) on ``inputs``.

    Writes into ``out_dir`` and returns the path to hand to ``load_tokenizer``: ``out_dir/tokenizer.json``
    for bpe (``vocab.json`` + ``merges.txt`` are written too), ``out_dir`` for wordpiece (``tokenizer.json``
    + ``vocab.txt``), ``out_dir/tokenizer.model`` for sentencepiece. ``t5_sentinels=100`` adds T5's
    sentinels; ``lowercase`` applies to wordpiece only; ``max_words`` trains on the inputs' first that many
    words (:func:`first_words`). WordPiece ids are canonical (:func:`_canonical_wordpiece`).
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
    if max_words is not None and max_words < 1:
        raise DataError(f"max_words must be at least 1, got {max_words}")
    os.makedirs(out_dir, exist_ok=True)
    texts = iter_texts(list(inputs), json_keys, text_docs)
    if max_words is not None:
        texts = first_words(texts, max_words)

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
    if kind == "wordpiece":
        tok = _canonical_wordpiece(tok, specials + ["[UNK]"])
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    tok.model.save(out_dir)  # vocab.json + merges.txt (bpe) or vocab.txt (wordpiece)
    return os.path.join(out_dir, "tokenizer.json") if kind == "bpe" else out_dir
