"""``mwb finetune detox``: SGEAT's domain-adaptive training of a GPT on filtered self-generated data.

Parsing and printing only: the start and config come from the one fine-tuning setup path and the default
data from the loop's own self-generation steps (:func:`mwb.tasks.detox.loop.finetune_detox`).
"""
from __future__ import annotations

import os

import click

from .options import build_config, default_out, training_options


@click.command(name="detox", help="SGEAT domain-adaptive training: continue a GPT's pretraining on a .bin/.idx "
                                 "prefix (filtered self-generated samples) with the paper's optimizer (constant "
                                 "lr 2e-5, Adam (0.9, 0.95), weight decay 0.1, clip 1.0; no optimizer state; "
                                 "20 steps of 8 x 128 tokens), reporting perplexity on held-out pretraining data "
                                 "(the bundled corpus) before and after. With no --checkpoint: smollm2-135m when "
                                 "installed, else the newest `mwb pretrain gpt` run (a tiny one is trained first "
                                 "if there is none). With no --data, self-generates 64 samples, scores them and "
                                 "keeps the least toxic half first. A larger run: --data from `mwb detox generate` "
                                 "/ `mwb score` / `mwb detox filter` / `mwb preprocess` at the paper's 100k+ "
                                 "samples, and --steps, --global-batch-size, --seq-length to match.")
@training_options
@click.option("--checkpoint", default=None, help="GPT to adapt (default: smollm2-135m when installed).")
@click.option("--data", default=None, help="Indexed data prefix (…_text_document) of the filtered samples.")
def detox_finetune(checkpoint, data, **kw):
    from mwb.core.config import ConfigError
    from mwb.tasks.detox.loop import finetune_detox

    if kw.get("resume"):
        raise ConfigError("mwb finetune detox does not resume: its runs are short; start a new one")
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    out = kw.get("out") or default_out("finetune-detox")
    res = finetune_detox(checkpoint, data, lambda base: build_config(None, kw, base=base), kw.get("tokenizer"),
                         out, kw.get("nproc"), say)
    if res:
        m = res["metrics"]
        say(f"mwb: held-out PPL {m['ppl_before']:.3f} -> {m['ppl']:.3f} after {m['steps']} steps")
        say(f"mwb: results       {os.path.join(out, 'results.json')}")
        say(f"mwb: run directory {os.path.abspath(out)}")
