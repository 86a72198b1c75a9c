"""``mwb generate``: sample completions of one or more prompts from a checkpoint (see
:mod:`mwb.evaluation.generation` for the sampling rules); ``mwb generate story`` writes a controllable story."""
from __future__ import annotations

import json

import click

from .options import pack_weights_option


@click.group(invoke_without_command=True, help="Generate text from a GPT checkpoint. --temperature 0 is greedy "
                                               "decoding. `mwb generate story --help`: knowledge-grounded stories.")
@click.option("--checkpoint", default=None, help="mwb run/checkpoint directory or Hugging Face model directory "
                                                 "(default: the newest runs/pretrain-gpt-* run).")
@click.option("--prompt", "prompts", multiple=True, help="A prompt (repeat for several). Required.")
@click.option("--max-tokens", type=click.IntRange(min=0), default=64, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="0 = no top-k filter.")
@click.option("--top-p", type=click.FloatRange(min=0, max=1, min_open=True), default=1.0, show_default=True)
@click.option("--stop", "stops", multiple=True, help="Stop string (repeatable); not included in the output.")
@click.option("--seed", type=int, default=None, help="Same seed and prompts ⇒ same completions.")
@click.option("--n", "n", type=click.IntRange(min=1), default=1, show_default=True,
              help="Completions per prompt (each its own seeded random stream).")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True,
              help="Sequences decoded together (continuous batching on a preallocated KV cache); does not change "
                   "the output.")
@click.option("--tokenizer", default=None, help="Override the checkpoint's tokenizer.")
@pack_weights_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per completion (text, tokens, logprobs).")
@click.pass_context
def generate(ctx, checkpoint, prompts, max_tokens, temperature, top_k, top_p, stops, seed, n, batch_size, tokenizer,
             pack_weights, as_json):
    if ctx.invoked_subcommand is not None:
        return
    if not prompts:
        raise click.UsageError("Missing option '--prompt'.")
    from mwb.evaluation.generation import SamplingParams, generate as run
    from mwb.evaluation.loading import load_language_model, resolve_checkpoint

    checkpoint = resolve_checkpoint(checkpoint, say=lambda m: click.echo(m, err=True))
    _, lm = load_language_model(checkpoint, tokenizer, pack_weights=pack_weights)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                            stop=tuple(stops), seed=seed, n=n)
    for g in run(lm, list(prompts), params, batch_size=batch_size):
        if as_json:
            click.echo(json.dumps({"prompt": g.prompt, "text": g.text, "tokens": g.tokens,
                                   "logprobs": g.logprobs, "finish_reason": g.finish_reason}))
        else:
            click.echo(g.prompt + g.text)
            click.echo("-" * 40)


from .story import generate_story  # noqa: E402  (mwb generate story: MEGATRON-CNTRL, mwb/tasks/story)

generate.add_command(generate_story)
