"""``mwb generate story``: write a story with a ``mwb finetune story`` run (MEGATRON-CNTRL).

Parsing and printing only; the work is in :mod:`mwb.tasks.story.writer`. (``mwb finetune story`` is in
:mod:`.finetune`, next to the other fine-tuning commands.)
"""
from __future__ import annotations

import json

import click



@click.command(name="story", help="Write a 5-sentence story from its first sentence with a `mwb finetune story` "
                                  "run, showing the keywords and knowledge used for each sentence.")
@click.option("--checkpoint", default=None, help="A `mwb finetune story` run (default: the newest one).")
@click.option("--first", "firsts", multiple=True, help="The first sentence (repeat for several stories).")
@click.option("--keywords", "keywords", multiple=True,
              help='Control: keywords of sentences 2, 3, … as "a,b;c" (";" between sentences; one per --first).')
@click.option("--temperature", type=click.FloatRange(min=0), default=0.8, show_default=True)
@click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True)
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option("--conceptnet", default=None, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per story.")
def generate_story(checkpoint, firsts, keywords, temperature, top_k, seed, conceptnet, as_json):
    from mwb.core.config import ConfigError
    from mwb.tasks.story.keywords import parse_control
    from mwb.tasks.story.writer import WriteConfig, StoryWriter

    from .finetune import latest_run

    checkpoint = checkpoint or latest_run("finetune-story")
    if checkpoint is None:
        raise ConfigError("no --checkpoint given and no runs/finetune-story-* run: run `mwb finetune story` first")
    firsts = list(firsts) or ["Jenny wanted to learn how to bake a cake."]
    if len(keywords) > len(firsts):
        raise ConfigError(f"{len(keywords)} --keywords for {len(firsts)} --first sentence(s)")
    control = [parse_control(k) for k in keywords] + [parse_control("") for _ in firsts[len(keywords):]]
    writer = StoryWriter(checkpoint, conceptnet=conceptnet)
    cfg = WriteConfig(temperature=temperature, top_k=top_k, seed=seed)
    for story in writer.write(firsts, control, cfg):
        if as_json:
            click.echo(json.dumps(story))
            continue
        click.echo(story["sentences"][0])
        for sent, step in zip(story["sentences"][1:], story["steps"]):
            how = "given" if step["controlled"] else "predicted"
            click.echo(f"  keywords ({how}): {', '.join(step['keywords']) or '-'}")
            for k in step["knowledge"]:
                click.echo(f"  knowledge: {k}")
            click.echo(sent)
        click.echo("-" * 40)
