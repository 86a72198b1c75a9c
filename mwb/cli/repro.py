"""``mwb repro``: a paper's experiment as one command, the list of experiments, and the page of committed runs.

    mwb repro [--list] [--json]                     what can be reproduced, with each committed verdict
    mwb repro NAME [--scale S] [--seeds N] [--first-seed K] [--out DIR] [--dry-run] [--set key=value]
    mwb repro report [--root reproductions] [--out docs/reproductions.md]
    mwb repro reanalyze [--root reproductions] [--json]   old and two-level verdicts of the committed reports

Everything is in :mod:`mwb.repro`; this module parses, calls one function and prints. It also hands the
runner the in-process invoker: each cell's ``mwb ...`` commands run through this click command object, the
functions a user's typed command runs.
"""
from __future__ import annotations

import json
import shlex

import click

from .options import log_option

SCALE_NAMES = ["smoke", "cpu", "gpu", "paper"]  # mwb.repro.api.SCALES, spelled out so --help imports nothing


def invoke_in_process(argv) -> None:
    """Run ``mwb ARGS`` in this process through the click command; its errors arrive as exceptions."""
    from mwb.cli.main import cli
    from mwb.core.config import ConfigError
    from mwb.core.errors import MwbError
    argv = list(argv)
    try:
        cli.main(args=argv[1:], prog_name="mwb", standalone_mode=False)
    except click.ClickException as e:
        raise ConfigError(f"`{shlex.join(argv)}`: {e.format_message()}") from e
    except SystemExit as e:
        if e.code not in (0, None):
            raise MwbError(f"`{shlex.join(argv)}` exited with status {e.code}") from None


def _options(sets) -> dict:
    from mwb.core.config import ConfigError
    out = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key] = value
    return out


def _print_list(root: str, as_json: bool) -> None:
    from mwb.repro.index import listing
    from mwb.repro.registry import import_errors
    rows = listing(root)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        done = r["committed"]
        state = (f"committed: {done['verdict']} ({done['scale']}, {done['seeds']} seed(s))" if done
                 else "not committed")
        click.echo(f"{r['name']}{'  [deterministic]' if r['deterministic'] else ''}  —  {state}")
        click.echo("  papers:  " + "; ".join(f"{p['citation']} (arXiv {p['arxiv']})" for p in r["paper"]))
        click.echo(f"  claim:   {r['claim']}")
        click.echo(f"  metrics: {', '.join(r['metrics'])}")
        click.echo("  scales:  " + ", ".join(f"{n} ({s['budget']})" for n, s in r["scales"].items()))
    for module, err in import_errors().items():
        click.echo(f"mwb: mwb.repro.experiments.{module} failed to import: {err}", err=True)


@click.command("repro", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", required=False)
@click.option("--list", "do_list", is_flag=True, help="list the experiments (also: no NAME)")
@click.option("--json", "as_json", is_flag=True, help="with --list: one JSON array")
@click.option("--scale", type=click.Choice(SCALE_NAMES), default="cpu", show_default=True,
              help="smoke: a pipeline check; cpu: the documented result; gpu: one GPU; paper: the paper's setting")
@click.option("--seeds", type=click.IntRange(min=1), help="seeds per condition [the scale's default]")
@click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="the first seed: seeds run FIRST .. FIRST+N-1 (e.g. 5 to re-run a 5-seed report on new seeds)")
@click.option("--out", help="output directory [reproductions-runs/NAME-SCALE]; for `report`: the page to write "
                            "[docs/reproductions.md]")
@click.option("--dry-run", is_flag=True,
              help="print the commands (and at paper scale mwb plan's estimate); run nothing")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="a paper-scale data flag, repeatable")
@click.option("--root", help="committed reproductions [reproductions]")
@log_option
@click.option("--allow-dirty", is_flag=True,
              help="write a report under reproductions/ from an uncommitted tree (env.json marks it)")
def repro(name, do_list, as_json, scale, seeds, first_seed, out, dry_run, sets, root, log, allow_dirty):
    """Reproduce a paper's experiment: every (condition, seed) cell, paired statistics, a computed verdict.

    Writes OUT/report.md, results.json, predictions/, commands.sh, env.json and a plot. A rerun with the
    same --out skips the cells that finished. `mwb repro report` regenerates docs/reproductions.md from
    reproductions/*/results.json."""
    from mwb.repro import index

    root = root or index.default_root()
    if do_list or name is None:
        _print_list(root, as_json)
        return
    if name == "reanalyze":
        from mwb.repro import reanalysis
        rows = reanalysis.verdict_table(root)
        click.echo(json.dumps(rows, indent=2) if as_json else reanalysis.render_table(rows), nl=as_json)
        return
    if name == "report":
        page = out or "docs/reproductions.md"
        n = index.write_index(root, page)
        click.echo(f"wrote {page} ({n} reproduction{'s' if n != 1 else ''} from {root})")
        return
    from mwb.repro.registry import get_experiment
    from mwb.core.training.tracking import check_available
    from mwb.repro.runner import dry_run as describe, plan_run, run_experiment

    plan = plan_run(get_experiment(name), scale, seeds, out, _options(sets), allow_dirty=allow_dirty,
                    first_seed=first_seed)
    if plan.note:
        click.echo(f"mwb: {plan.note}", err=True)
    if dry_run:
        click.echo(describe(plan), nl=False)
        return
    results = run_experiment(plan, invoke=invoke_in_process, trackers=check_available(log))
    click.echo(f"{name} ({plan.scale.name} scale): verdict {results['verdict']}")
    click.echo(f"report: {plan.out}/report.md (results.json, commands.sh, env.json, {name}.png beside it)")
