"""``mwb chat``: talk to a checkpoint in the terminal (stdin/stdout), optionally grounded in retrieved
knowledge or in an actor's reference utterances. The conversation logic is
:mod:`mwb.tasks.dialogue.chat_session`; this module reads lines and prints replies."""
from __future__ import annotations

import sys

import click

from .options import pack_weights_option

HELP = ("commands: /knowledge shows the passages retrieved for the last turn, /reset starts over, "
        "/quit (or Ctrl-D) exits")


@click.command(help="Chat with a model in the terminal. Uses the model's chat template when it has one. "
                    "--knowledge grounds replies in BM25-retrieved passages, --actor in an actor's utterances.")
@click.option("--checkpoint", default="smollm2-135m", show_default=True,
              help="GPT checkpoint, run directory, Hugging Face directory or named model.")
@click.option("--tokenizer", default=None, help="Override the checkpoint's tokenizer.")
@click.option("--knowledge", default=None, help="Passages TSV (id<TAB>text<TAB>title), 'bundled' (the bundled "
                                                "Wikipedia sample) or 'wordnet' (WordNet glosses), searched with "
                                                "BM25 every turn.")
@click.option("--actor", default=None, help="Chitchat actor id: condition replies on that actor's utterances.")
@click.option("--references", type=click.IntRange(min=1), default=5, show_default=True,
              help="Reference utterances of --actor.")
@click.option("--top-k", type=click.IntRange(min=1), default=2, show_default=True, help="Passages per turn.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--temperature", type=click.FloatRange(0, 2), default=0.7, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True)
@click.option("--seed", type=int, default=None)
@click.option("--system", default=None, help="System prompt (default: a short friendly-partner instruction).")
@pack_weights_option
@click.option("--layout", type=click.Choice(["chat", "dialogue"]), default="chat", show_default=True,
              help="chat: the model's chat template (or the plain format); dialogue: the 'Conversation: A:/B:' "
                   "layout `mwb finetune dialogue` trains on.")
def chat(checkpoint, tokenizer, knowledge, actor, references, top_k, max_tokens, temperature, top_p, seed, system,
         pack_weights, layout):
    from mwb.evaluation.chat_format import chat_format_for
    from mwb.evaluation.loading import load_language_model
    from mwb.tasks.dialogue.chat_session import (DEFAULT_SYSTEM, ChatSession, ChatSettings, KnowledgeBase,
                                                 actor_references)

    say = lambda m: click.echo(m, err=True)  # noqa: E731
    refs = actor_references(actor, references, say) if actor else ()
    kb = KnowledgeBase(knowledge) if knowledge else None
    say(f"loading {checkpoint} ...")
    _, lm = load_language_model(checkpoint, tokenizer, pack_weights=pack_weights)
    fmt = chat_format_for(tokenizer or lm.tokenizer.path)
    settings = ChatSettings(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed,
                            system=DEFAULT_SYSTEM if system is None else system, top_k_passages=top_k)
    session = ChatSession(lm, fmt, settings, kb, refs, dialogue_layout=layout == "dialogue")
    say(f"chat format: {'dialogue layout' if layout == 'dialogue' else fmt.source}" + (f"; knowledge: {kb.path} ({len(kb.evidence)} passages)" if kb else "")
        + (f"; actor {actor} ({len(refs)} reference utterances)" if actor else ""))
    say(HELP)
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            click.echo()
            break
        line = line.strip()
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        if line == "/help":
            click.echo(HELP)
        elif line == "/reset":
            session.reset()
            click.echo("(history cleared)")
        elif line == "/knowledge":
            _show_knowledge(session, kb is not None)
        else:
            try:
                text = session.reply(line)
            except ValueError as e:  # the conversation no longer fits the model
                click.echo(f"(cannot reply: {e}; /reset starts over)")
                continue
            click.echo(f"bot> {text}")
        sys.stdout.flush()
    click.echo("bye", err=True)


def _show_knowledge(session, enabled: bool) -> None:
    if not enabled:
        click.echo("(no knowledge source: start with --knowledge bundled or --knowledge FILE.tsv)")
    elif not session.last_knowledge:
        click.echo("(nothing retrieved yet)")
    for i, p in enumerate(session.last_knowledge, 1):
        click.echo(f"[{i}] {p['title'] or p['id']}: {p['text']}")
