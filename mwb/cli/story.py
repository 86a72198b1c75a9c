"""``mwb finetune story`` and ``mwb generate story``: MEGATRON-CNTRL's training pipeline and story writing.

Parsing and printing only; the work is in :mod:`mwb.tasks.story` (``train.finetune_story`` through the one
fine-tuning setup path, ``writer.StoryWriter``).
"""
from __future__ import annotations

import json
import os

import click

from .options import build_config, default_out, training_options


@click.command(name="story", help="MEGATRON-CNTRL: train the keyword predictor, the knowledge ranker (MiniLM, "
                                  "weak labels) and the knowledge-conditioned generator on ROCStories. With no "
                                  "arguments (sized to finish within 10 minutes on 2 cores): the stories in "
                                  "ConceptNet 5.7.0's sdist and WordNet knowledge (both fetched from PyPI on first "
                                  "use, unless MWB_OFFLINE or HF_HUB_OFFLINE is set), the ranker trained 20 "
                                  "steps, and SmolLM2-135M with LoRA (32 stories, one epoch per part) when the "
                                  "models extra is installed, else the newest `mwb pretrain gpt` run (a tiny one "
                                  "is trained first if there is none; 200 stories). A larger run: "
                                  "--checkpoint smollm2-135m (full fine-tuning) or a longer `mwb pretrain gpt`, "
                                  "--train-stories 0 "
                                  "(every story of the train split), --ranker-steps 200, --generator-epochs 3 "
                                  "— hours on a CPU; see docs/story.md.")
@training_options
@click.option("--checkpoint", default=None, help="GPT both the keyword predictor and the generator start from.")
@click.option("--data", default=None, type=click.Path(), help="ROCStories CSV / Story Cloze TSV file or directory.")
@click.option("--conceptnet", default=None, type=click.Path(exists=True, dir_okay=False),
              help="ConceptNet assertions CSV (5 tab-separated columns) instead of WordNet.")
@click.option("--train-stories", type=click.IntRange(min=0), default=None,
              help="Training stories used (0: all of the train split; default 200 from the tiny GPT, 32 from "
                   "SmolLM2-135M).")
@click.option("--dev-stories", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--top-n", type=click.IntRange(min=1), default=3, show_default=True, help="Knowledge sentences kept.")
@click.option("--knowledge/--no-knowledge", default=True, show_default=True,
              help="--no-knowledge trains the generator without knowledge (the ablation).")
@click.option("--delexicalize", is_flag=True, help="Replace character names by [NAME1], [NAME2], …")
@click.option("--ranker-steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--generator-epochs", type=click.IntRange(min=1), default=None,
              help="Default 2 from the tiny GPT, 1 from SmolLM2-135M.")
@click.option("--keyword-epochs", type=click.IntRange(min=1), default=None, help="Default 1.")
def finetune_story(checkpoint, data, conceptnet, train_stories, dev_stories, top_n, knowledge, delexicalize,
                   ranker_steps, generator_epochs, keyword_epochs, **kw):
    import dataclasses

    from mwb.core.data.package_files import package_path
    from mwb.tasks.story.ranker import RankerConfig
    from mwb.tasks.story.train import finetune_story as run

    say = lambda m: click.echo(m, err=True)  # noqa: E731
    out = kw.get("out") or default_out("finetune-story")
    ranker = dataclasses.replace(RankerConfig(), steps=ranker_steps)
    if kw.get("seed") is not None:  # --seed seeds the ranker's batches too, not only the GPT parts
        ranker = dataclasses.replace(ranker, seed=kw["seed"])
    results = run(checkpoint, data or package_path("rocstories"), conceptnet,
                  lambda base: build_config(None, kw, base=base), kw.get("tokenizer"), out, kw.get("nproc"), say,
                  ranker=ranker, train_stories=train_stories,
                  dev_stories=dev_stories, top_n=top_n, knowledge=knowledge, delexicalize=delexicalize,
                  keyword_epochs=keyword_epochs, generator_epochs=generator_epochs)
    if results:
        m = results["metrics"]
        if knowledge:
            say(f"mwb: ranker loss {m['ranker_loss_first']:.4f} → {m['ranker_loss_last']:.4f}; top-{top_n} "
                f"agreement with the weak labels {m['ranker_top_n_agreement']:.3f} (chance {m['ranker_chance']:.3f})")
        say(f"mwb: keyword predictor {results['parts']['keywords'] or '- (no knowledge: not needed)'}")
        say(f"mwb: generator         {results['parts']['generator']}")
        say(f"mwb: results           {os.path.join(out, 'results.json')}")
        say(f"mwb: run directory     {os.path.abspath(out)}  (mwb generate story --checkpoint {out})")


@click.command(name="story", help="Write a 5-sentence story from its first sentence with a `mwb finetune story` "
                                  "run, showing the keywords and knowledge used for each sentence.")
@click.option("--checkpoint", default=None, help="A `mwb finetune story` run (default: the newest one).")
@click.option("--first", "firsts", multiple=True, help="The first sentence (repeat for several stories).")
@click.option("--keywords", "keywords", multiple=True,
              help='Control: keywords of sentences 2, 3, … as "a,b;c" (";" between sentences; one per --first).')
@click.option("--temperature", type=click.FloatRange(min=0), default=0.8, show_default=True)
@click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True)
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option("--samples", type=click.IntRange(min=1), default=4, show_default=True,
              help="Candidate sentences drawn per step; the one that includes most of the step's keywords "
                   "(given or predicted) is kept. 1: a single draw, as the paper and `mwb eval story` decode.")
@click.option("--conceptnet", default=None, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per story.")
def generate_story(checkpoint, firsts, keywords, temperature, top_k, seed, samples, conceptnet, as_json):
    from mwb.core.config import ConfigError
    from mwb.tasks.story.keywords import parse_control
    from mwb.tasks.story.writer import SENTENCES, StoryWriter, WriteConfig

    from mwb.core.training.run_dir import latest_run

    checkpoint = checkpoint or latest_run("finetune-story")
    if checkpoint is None:
        raise ConfigError("no --checkpoint given and no runs/finetune-story-* run: run `mwb finetune story` first")
    firsts = list(firsts) or ["Jenny wanted to learn how to bake a cake."]
    if len(keywords) > len(firsts):
        raise ConfigError(f"{len(keywords)} --keywords for {len(firsts)} --first sentence(s)")
    control = [parse_control(k) for k in keywords] + [parse_control("") for _ in firsts[len(keywords):]]
    writer = StoryWriter(checkpoint, conceptnet=conceptnet)
    cfg = WriteConfig(temperature=temperature, top_k=top_k, seed=seed, samples=samples)
    stories = writer.write(firsts, control, cfg)
    for story in stories:
        if as_json:
            click.echo(json.dumps(story))
            continue
        click.echo(story["sentences"][0])
        for sent, step in zip(story["sentences"][1:], story["steps"]):
            how = "given" if step["controlled"] else "predicted"
            click.echo(f"  keywords ({how}): {', '.join(step['keywords']) or '-'}")
            for k in step["knowledge"]:
                click.echo(f"  knowledge: {k}")
            click.echo(sent + ("  [truncated at the length limit]" if step["truncated"] else ""))
        click.echo("-" * 40)
    empty = sum(s["empty_sentences"] for s in stories)
    if empty:  # printed above for the record, but an empty sentence is a failed story
        from mwb.core.errors import MwbError
        raise MwbError(f"{empty} of {(SENTENCES - 1) * len(stories)} generated sentences have no words (the "
                       f"prompt left the model no room): shorten the first sentence or train a longer --seq-length")
