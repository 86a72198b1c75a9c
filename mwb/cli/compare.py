"""``mwb compare A B --metric M``: paired comparison of two evaluations item by item (mwb/evaluation/stats.py)."""
from __future__ import annotations

import json

import click

_HELP = """Compare two evaluations of the same items on one metric: mean A, mean B, diff = B - A, a 95% paired
bootstrap interval and p (one run each: McNemar's exact test for 0/1 metrics, a paired permutation test
otherwise).

A and B are each a predictions.jsonl, a run directory holding one, or a comma-separated list of them (one per
seed, seed k of A paired with seed k of B; one run against several: a seed-independent side, paired with each).
Over several seeds the test is two-level, as mwb repro's: a sign-flip test over the distinct items of their
seed-averaged differences and a paired t-test over the seeds' differences; p is the larger (both must
reject), the interval a bootstrap over seeds and items (docs/evaluation.md)."""


@click.command(help=_HELP)
@click.argument("a", required=False)
@click.argument("b", required=False)
@click.option("--metric", "-m", default=None, help="The per-item metric, named as in results.json (e.g. accuracy).")
@click.option("--resamples", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Bootstrap resamples and permutations.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the resampling.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_context
def compare(ctx, a, b, metric, resamples, seed, as_json):
    from mwb.core.config import ConfigError
    from mwb.evaluation.predictions import read_predictions
    from mwb.evaluation.stats import compare_runs

    if a is None:
        click.echo(ctx.get_help())
        return
    if b is None or metric is None:
        raise ConfigError("mwb compare needs two runs and a metric: mwb compare A B --metric M")
    runs_a, runs_b = _split(a), _split(b)
    if len(runs_a) != len(runs_b) and 1 not in (len(runs_a), len(runs_b)):
        raise ConfigError(f"mwb compare: A lists {len(runs_a)} runs and B lists {len(runs_b)}; "
                          f"give one per seed, the same number on each side (or one seed-independent run)")
    r = compare_runs([read_predictions(p) for p in runs_a], [read_predictions(p) for p in runs_b], metric,
                     resamples=resamples, seed=seed)
    if as_json:
        click.echo(json.dumps(r.to_dict()))
        return
    items = "distinct paired items" if r.test == "two-level" else "paired items"
    click.echo(f"metric  {r.metric}  ({r.n_items} {items}, {r.n_seeds} seed{'s' if r.n_seeds > 1 else ''})")
    click.echo(f"mean A  {r.mean_a:.6g}")
    click.echo(f"mean B  {r.mean_b:.6g}")
    click.echo(f"diff    {r.diff:+.6g}  (B - A)")
    how = "two-level bootstrap over seeds and items" if r.test == "two-level" else "paired bootstrap"
    click.echo(f"95% CI  [{r.ci95[0]:+.6g}, {r.ci95[1]:+.6g}]  ({how}, {r.resamples} resamples, seed {r.seed})")
    click.echo(f"p       {r.p:.4g}  ({r.test})")
    if r.test == "two-level":
        click.echo(f"p items {r.p_items:.4g}  ({r.item_test})")
        click.echo(f"p seeds {r.p_seeds:.4g}  ({r.seed_test}; per-seed diffs "
                   f"{', '.join(f'{d:+.4g}' for d in r.seed_diffs)})")


def _split(spec: str) -> list[str]:
    from mwb.core.config import ConfigError
    parts = [p.strip() for p in spec.split(",")]
    if not all(parts):
        raise ConfigError(f"mwb compare: empty entry in {spec!r} (use FILE_OR_DIR[,FILE_OR_DIR...])")
    return parts
