"""``mwb checkpoint inspect|consolidate``: look into a checkpoint without a process group, export it whole.

``inspect`` reads only ``metadata.json`` plus file sizes (it validates the checkpoint the way a load does,
so a missing or truncated shard is reported as the one-line error a ``--resume`` would give).
"""
from __future__ import annotations

import json
import os

import click


@click.group(help="Inspect or consolidate mwb checkpoints.")
def checkpoint():
    pass


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _split(t: dict) -> str:
    chunks = t.get("chunks", [])
    tp = {c["tp"]["dim"] for c in chunks if c.get("tp")}
    ep = any(c.get("ep") for c in chunks)
    parts = [f"{len(chunks)} piece{'s' if len(chunks) != 1 else ''}"]
    if tp:
        parts.append(f"tp dim {sorted(tp)[0]}")
    if ep:
        parts.append("ep dim 0")
    if t.get("padded_shape") != t.get("shape"):
        parts.append(f"vocab padded to {t['padded_shape'][0]}")
    return ", ".join(parts)


@checkpoint.command(help="Print a checkpoint's layout, step, tensors (global shapes) and files. DIR may be a run "
                         "directory, its checkpoints/ directory or a step_N directory.")
@click.argument("directory", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the metadata as JSON instead.")
@click.option("--all", "show_all", is_flag=True, help="List every tensor (default: the first 40).")
def inspect(directory, as_json, show_all):
    from mwb.core.checkpoint.consolidate import resolve
    from mwb.core.checkpoint.format import describe_layout, read_metadata

    path = resolve(directory)
    meta = read_metadata(path)
    if as_json:
        meta = dict(meta)
        meta.pop("rng", None)
        click.echo(json.dumps(meta, indent=1))
        return
    m = (meta.get("config") or {}).get("model", {})
    tensors = meta.get("tensors") or {}
    files = meta.get("files") or {}
    n_params = sum(int(__import__("math").prod(t["shape"])) for t in tensors.values())
    with_optim = sum(1 for t in tensors.values() if t.get("optim"))
    click.echo(f"checkpoint   {path}")
    click.echo(f"format       {meta['format']}")
    click.echo(f"step         {meta.get('step')}")
    click.echo(f"layout       {describe_layout(meta.get('layout') or {})}")
    click.echo(f"model        {meta.get('arch')}: {m.get('num_layers')} layers, hidden {m.get('hidden_size')}, "
               f"{m.get('num_attention_heads')} heads, vocab {meta.get('vocab_size')}, "
               f"{n_params / 1e6:.2f}M parameters")
    click.echo(f"optimizer    {(meta.get('optimizer') or {}).get('name', 'none')}: state for {with_optim} of "
               f"{len(tensors)} tensors")
    click.echo(f"tokenizer    {meta.get('tokenizer') or 'none'}")
    total = sum(f["bytes"] for f in files.values())
    click.echo(f"files        {len(files)} shard file(s), {_size(total)} (all present, sizes match)")
    for name, f in sorted(files.items()):
        c = f.get("coords", {})
        click.echo(f"  {name}  rank {f['rank']} (tp {c.get('tp')} pp {c.get('pp')} dp {c.get('dp')} "
                   f"ep {c.get('ep', 0)})  {_size(f['bytes'])}")
    click.echo(f"tensors      {len(tensors)}")
    names = sorted(tensors) if show_all else sorted(tensors)[:40]
    width = max((len(n) for n in names), default=0)
    for name in names:
        t = tensors[name]
        optim = " +optimizer" if t.get("optim") else ""
        click.echo(f"  {name:<{width}}  {str(t['shape']):<14} {t['dtype']:<9} {_split(t)}{optim}")
    if len(names) < len(tensors):
        click.echo(f"  … {len(tensors) - len(names)} more (--all)")


@checkpoint.command(help="Write the full model of SRC (any checkpoint path, or a Hugging Face directory) as one "
                         "safetensors file with its config, for inference.")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
def consolidate(src, dst):
    from mwb.core.compose import consolidate as run

    if os.path.exists(dst):
        raise click.UsageError(f"{dst} exists; choose another file name")
    out = run(src, dst)
    click.echo(f"mwb: consolidated {src} → {out}")
