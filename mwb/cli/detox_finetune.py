"""``mwb finetune detox``: SGEAT's domain-adaptive training of a GPT on filtered self-generated data."""
from __future__ import annotations

import os

import click


@click.command(name="detox", help="SGEAT domain-adaptive training: continue a GPT's pretraining on a .bin/.idx "
                                 "prefix (filtered self-generated samples) with the paper's optimizer (constant "
                                 "lr 2e-5, Adam (0.9, 0.95), weight decay 0.1, clip 1.0; no optimizer state), "
                                 "reporting perplexity on held-out pretraining data (the bundled corpus) "
                                 "before and after. With no --data, self-generates and filters a small set first.")
@click.option("--checkpoint", default=None, help="GPT to adapt (default: smollm2-135m).")
@click.option("--data", default=None, help="Indexed data prefix (…_text_document) of the filtered samples.")
@click.option("--tokenizer", default=None, help="Tokenizer (default: the checkpoint's).")
@click.option("--steps", type=int, default=None, help="Optimizer steps (default 20).")
@click.option("--lr", type=float, default=None, help="Constant learning rate (default 2e-5).")
@click.option("--global-batch-size", type=int, default=None)
@click.option("--micro-batch-size", type=int, default=None)
@click.option("--seq-length", type=int, default=None)
@click.option("--seed", type=int, default=None)
@click.option("--nproc", type=int, default=None, help="Data-parallel ranks.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any config field, e.g. optim.weight_decay=0.1.")
@click.option("--out", type=click.Path(), default=None, help="Run directory (default runs/finetune-detox-<time>).")
def detox_finetune(checkpoint, data, tokenizer, steps, lr, global_batch_size, micro_batch_size, seq_length, seed,
                   nproc, sets, out):
    from mwb.core.config import ConfigError
    from mwb.tasks.detox.dapt import domain_adaptive_train

    from .detox import _default_checkpoint
    from .options import default_out
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    checkpoint = checkpoint or _default_checkpoint(say)
    out = out or default_out("finetune-detox")
    if data is None:
        data = _small_filtered_set(checkpoint, out, say)
    tree: dict = {"train": {k: v for k, v in dict(steps=steps, global_batch_size=global_batch_size, seed=seed,
                                                  micro_batch_size=micro_batch_size, seq_length=seq_length).items()
                            if v is not None}}
    if lr is not None:
        tree["optim"] = {"lr": lr, "min_lr": lr}
    for s in sets:
        key, eq, value = s.partition("=")
        section, dot, field = key.partition(".")
        if not eq or not dot:
            raise ConfigError(f"--set expects section.field=value, got '{s}'")
        import yaml
        tree.setdefault(section, {})[field] = yaml.safe_load(value)
    res = domain_adaptive_train(checkpoint, data, out, tree, nproc=nproc, tokenizer=tokenizer)
    if res:
        m = res["metrics"]
        say(f"mwb: held-out PPL {m['ppl_before']:.3f} -> {m['ppl']:.3f} after {m['steps']} steps")
        say(f"mwb: results       {os.path.join(out, 'results.json')}")
        say(f"mwb: run directory {os.path.abspath(out)}")


def _small_filtered_set(checkpoint: str, out: str, say) -> str:
    """The bundled default: 64 self-generated samples of the checkpoint, scored, least toxic half kept."""
    from mwb.evaluation.loading import load_language_model
    from mwb.evaluation.toxicity import Scorer, ScorerSpec
    from mwb.evaluation.toxicity.annotate import score_rows
    from mwb.tasks.detox.loop import prepare
    from mwb.tasks.detox.selfgen import filter_least_toxic, self_generate
    say("mwb: no --data given: self-generating 64 samples, scoring them and keeping the least toxic half")
    _, lm = load_language_model(checkpoint)
    rows = score_rows(self_generate(lm, 64, 64), Scorer(ScorerSpec()))
    return prepare(filter_least_toxic(rows), os.path.join(out, "selfgen.filtered.jsonl"), lm.tokenizer.path)
