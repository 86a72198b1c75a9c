"""``mwb models list``: the named real models ``--checkpoint NAME`` accepts, and whether each is installed.

The registry and the name → checkpoint resolution live in :mod:`mwb.core.named_models`; this command only
shows them, so a user can see which names work offline on this machine and how to install the others.
"""
from __future__ import annotations

import json

import click


@click.group(help="Named real models for --checkpoint NAME (e.g. smollm2-135m, minilm-l6, hf:ORG/NAME).")
def models():
    pass


@models.command("list", help="Each named model: architecture, size, parallel layouts, and whether it is installed.")
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON object per line.")
def list_models(as_json):
    from mwb.core.named_models import MODELS, model_rows

    rows = model_rows()
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    for row in rows:
        state = "installed" if row["installed"] else f"not installed ({MODELS[row['name']].install})"
        click.echo(f"{row['name']:<14} {row['params']:>7}  {row['architecture']}")
        click.echo(f"{'':<14} {'':>7}  {row['package']}, {row['licence']}: {state}")
        click.echo(f"{'':<14} {'':>7}  layouts: {row['layouts']}")
    click.echo("hf:ORG/NAME    any GPT-2 / Llama / BERT repository of the Hugging Face hub (needs the hub online)")
