"""``mwb preprocess``: documents → Megatron indexed datasets (logic in :mod:`mwb.core.data.preprocess`)."""
from __future__ import annotations

import click

# options that take one or more values, Megatron style: ``--input a.jsonl b.jsonl``
_MULTI = ("--input", "--json-keys")


class _MultiValueCommand(click.Command):
    """Rewrites ``--input a b`` into ``--input a --input b`` before click parses (click options take one
    value each; ``multiple=True`` alone would reject the Megatron-style spelling)."""

    def parse_args(self, ctx, args):
        out, current, has_value = [], None, False
        for i, a in enumerate(args):
            if a == "--":
                out += args[i:]
                break
            if a.startswith("-") and a != "-":
                name, eq, _ = a.partition("=")
                current, has_value = (name if name in _MULTI else None), bool(eq)
                out.append(a)
            elif current and has_value:
                out += [current, a]
            else:
                out.append(a)
                has_value = True
        return super().parse_args(ctx, out)


@click.command(cls=_MultiValueCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--input", "inputs", multiple=True, required=True, metavar="FILE [FILE...]",
              help="Input files: .jsonl/.json (one JSON object per line; a .json array also works), .txt, "
                   ".parquet, .csv/.tsv, .arrow, MEDLINE/PubMed .xml (title + abstract per citation, key text); "
                   ".jsonl/.txt/.xml may be .gz. Read in the order given.")
@click.option("--output-prefix", required=True, metavar="P",
              help="Writes P_{key}_document.bin/.idx (or P_{key}_sentence.* with --split-sentences).")
@click.option("--tokenizer", required=True, metavar="T",
              help="tokenizer.json or HF tokenizer dir, SentencePiece .model, WordPiece vocab.txt, a dir "
                   "with GPT-2 vocab.json + merges.txt, a tiktoken .tiktoken file, gpt2, or a named model's "
                   "(smollm2-135m: mwb models list).")
@click.option("--json-keys", "json_keys", multiple=True, default=("text",), show_default=True, metavar="KEY [KEY...]",
              help="Record keys (parquet/csv columns) to tokenize; one output dataset per key.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Tokenizer processes; the output is identical for any number.")
@click.option("--append-eod", is_flag=True, help="Append the end-of-document token to every document.")
@click.option("--split-sentences", is_flag=True,
              help="One sequence per sentence (mwb's built-in regex splitter: ends at . ! ? before a capital, "
                   "or at a blank line; nltk is not used).")
@click.option("--text-docs", type=click.Choice(["line", "paragraph"]), default="line", show_default=True,
              help="For plain-text inputs: every non-empty line is a document (line), or every blank-line-"
                   "separated block is (paragraph).")
@click.option("--skip-bad", is_flag=True, help="Skip malformed records (counted and reported) instead of stopping.")
@click.option("--max-docs", type=click.IntRange(min=1), default=None,
              help="Read only the first N documents of the inputs, in order (a fixed slice of a large corpus).")
@click.option("--progress/--no-progress", default=None, help="tqdm progress bar on stderr (default: if a TTY).")
def preprocess(inputs, output_prefix, tokenizer, json_keys, workers, append_eod, split_sentences, text_docs,
               skip_bad, max_docs, progress):
    """Tokenize documents into Megatron MMIDIDX indexed datasets (.bin + .idx)."""
    from mwb.core.data.preprocess import preprocess as run
    from mwb.core.named_models import named_tokenizer

    r = run(list(inputs), output_prefix, named_tokenizer(tokenizer), json_keys=list(json_keys), workers=workers,
            append_eod=append_eod, split_sentences=split_sentences, skip_bad=skip_bad, text_docs=text_docs,
            progress=progress, max_docs=max_docs)
    for key, prefix in r.outputs.items():
        click.echo(f"wrote {prefix}.bin and {prefix}.idx  (key {key!r})")
    click.echo(f"{r.documents} documents, {r.sequences} sequences, {r.tokens} tokens from {r.bytes / 1e6:.1f} MB "
               f"in {r.seconds:.1f} s ({r.mb_per_s:.1f} MB/s, {r.documents / max(r.seconds, 1e-9):.0f} docs/s)")
    if r.skipped:
        click.echo(f"skipped {r.skipped} malformed record(s); first: {r.errors[0]}", err=True)
