"""``mwb tokenizer``: train (and inspect) tokenizers locally (logic in :mod:`mwb.core.tokenizers`)."""
from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def tokenizer():
    """Train or inspect a tokenizer."""


@tokenizer.command()
@click.option("--type", "kind", type=click.Choice(["sentencepiece", "bpe", "wordpiece"]), default="bpe",
              show_default=True, help="bpe = byte-level BPE (GPT-2 style), via Hugging Face tokenizers.")
@click.option("--vocab-size", type=click.IntRange(min=1), required=True,
              help="Vocabulary size, special tokens included.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--t5", "t5", is_flag=True, help="Add the 100 T5 sentinel tokens <extra_id_0>..<extra_id_99>.")
@click.option("--json-keys", "json_keys", multiple=True, default=("text",), show_default=True,
              help="Keys to read from JSONL/parquet inputs.")
@click.option("--lowercase", is_flag=True, help="Lower-case text first (wordpiece only: an uncased vocabulary).")
@click.option("--text-docs", type=click.Choice(["line", "paragraph"]), default="line", show_default=True,
              help="For plain-text inputs: a document per line or per blank-line-separated block.")
@click.option("--max-words", type=click.IntRange(min=1), default=None,
              help="Train on the inputs' first N whitespace-separated words only (vocabularies from different "
                   "corpora then see the same amount of text).")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def train(kind, vocab_size, out_dir, t5, json_keys, lowercase, text_docs, max_words, inputs):
    """Train a tokenizer on INPUT files (text, JSONL, parquet, ...).

    Adds the special tokens <|endoftext|> [PAD] [MASK] [CLS] [SEP] (ids 0-4), plus T5 sentinels with --t5.
    """
    from mwb.core.tokenizers import load_tokenizer, train_tokenizer

    path = train_tokenizer(kind, list(inputs), vocab_size, out_dir, t5_sentinels=100 if t5 else 0,
                           json_keys=list(json_keys), lowercase=lowercase, text_docs=text_docs,
                           max_words=max_words)
    tok = load_tokenizer(path)
    click.echo(f"wrote {kind} tokenizer with {tok.vocab_size} entries: {path}  (use --tokenizer {path})")


@tokenizer.command()
@click.argument("path")
@click.option("--text", default=None, help="Also encode this text and show the ids.")
def info(path, text):
    """Show a tokenizer's kind, size and special ids."""
    from mwb.core.tokenizers import load_tokenizer

    tok = load_tokenizer(path)
    click.echo(f"kind: {tok.kind}\nvocab_size: {tok.vocab_size}")
    for role in ("eod", "pad", "mask", "cls", "sep", "bos", "eos", "unk"):
        click.echo(f"{role}: {getattr(tok, role)}")
    click.echo(f"t5 sentinels: {len(tok.additional_special_tokens_ids)}")
    if text is not None:
        ids = tok.encode(text)
        click.echo(f"ids: {ids}\ndecoded: {tok.decode(ids)!r}")


@tokenizer.command()
@click.argument("tokenizers", nargs=-1, required=True)
@click.option("--text", "texts", multiple=True, required=True, type=click.Path(exists=True, dir_okay=False),
              help="Held-out text: any `mwb preprocess` input (.txt, .jsonl, MEDLINE .xml.gz, ...); repeatable.")
@click.option("--terms", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Domain terms, one per line: the share each tokenizer keeps whole (every word one piece).")
@click.option("--json-keys", "json_keys", multiple=True, default=("text",), show_default=True,
              help="Keys to read from JSONL/parquet inputs.")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False), help="Also write the rows as JSON.")
def report(tokenizers, texts, terms, json_keys, json_out):
    """Compare TOKENIZERS on held-out text: pieces per word, words and domain terms kept whole."""
    import json

    from mwb.core.atomic import atomic_write_text
    from mwb.core.data.readers import iter_texts
    from mwb.core.tokenizers import load_tokenizer
    from mwb.core.tokenizers.report import format_report, vocab_report, word_counts

    counts = word_counts(iter_texts(list(texts), list(json_keys)))
    term_list = None
    if terms:
        with open(terms, encoding="utf-8") as f:
            term_list = [line.strip() for line in f if line.strip()]
    rows = {path: vocab_report(load_tokenizer(path), counts, term_list) for path in tokenizers}
    click.echo(format_report(rows))
    if json_out:
        atomic_write_text(json_out, json.dumps(rows, indent=1) + "\n")
