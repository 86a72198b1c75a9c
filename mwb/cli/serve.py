"""``mwb serve``: an OpenAI-compatible ``/v1/completions`` server for a checkpoint (see
:mod:`mwb.evaluation.server`), batching concurrent requests as they arrive (:mod:`mwb.evaluation.engine`).
Binds 127.0.0.1 by default: exposing it is an explicit choice."""
from __future__ import annotations

import os

import click

from .options import pack_weights_option


@click.command(help="Serve a GPT checkpoint over an OpenAI-compatible HTTP API (POST /v1/completions, "
                    "POST /v1/chat/completions with streaming, GET /v1/models). Chat messages use the model's "
                    "chat template when its tokenizer has one, else a plain 'User: ... / Assistant:' format.")
@click.option("--checkpoint", default=None, help="mwb run/checkpoint directory or Hugging Face model directory "
                                                 "(default: the newest runs/pretrain-gpt-* run).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--tokenizer", default=None, help="Override the checkpoint's tokenizer.")
@click.option("--model-name", default=None, help="Model id reported by /v1/models (default: the directory name).")
@click.option("--max-tokens-limit", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Largest max_tokens a request may ask for.")
@click.option("--max-queue", type=click.IntRange(min=1), default=256, show_default=True,
              help="Requests that may wait for a batch row; one more is answered HTTP 429.")
@click.option("--batch-rows", type=click.IntRange(min=1), default=16, show_default=True,
              help="Sequences decoded together (requests join and leave the batch at every step).")
@click.option("--kv-tokens", type=click.IntRange(min=1), default=65536, show_default=True,
              help="KV-cache size in tokens (rows × longest prompt + max_tokens in the batch).")
@click.option("--prefill-tokens", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Prompt tokens per prefill pass (longer prompts are prefilled in chunks between decoding steps).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Split the model over N local tensor-parallel ranks (the heads must divide by N).")
@pack_weights_option
@click.option("--quiet", is_flag=True, help="Do not log each request.")
def serve(checkpoint, host, port, tokenizer, model_name, max_tokens_limit, max_queue, batch_rows, kv_tokens,
          prefill_tokens, nproc, pack_weights, quiet):
    from mwb.core.errors import MwbError
    from mwb.evaluation.chat_format import chat_format_for
    from mwb.evaluation.engine import EngineConfig
    from mwb.evaluation.loading import load_language_model, resolve_checkpoint
    from mwb.evaluation.server import Limits, make_server

    checkpoint = resolve_checkpoint(checkpoint, say=lambda m: click.echo(m, err=True))
    name = model_name or os.path.basename(os.path.normpath(checkpoint))
    engine = EngineConfig(max_queue=max_queue, batch_rows=batch_rows, kv_tokens=kv_tokens,
                          prefill_tokens=prefill_tokens)
    limits = Limits(max_tokens=max_tokens_limit)
    if nproc > 1:
        from mwb.core.training.launch import launch
        from mwb.evaluation.serve_ranks import serve_rank
        launch(serve_rank, nproc, checkpoint, tokenizer, host, port, name, limits, engine, quiet, pack_weights)
        return
    _, lm = load_language_model(checkpoint, tokenizer, pack_weights=pack_weights)
    try:
        chat_format = chat_format_for(tokenizer or lm.tokenizer.path)
        server = make_server(lm, host, port, name, limits, quiet=quiet, chat_format=chat_format,
                             engine_config=engine)
    except OSError as e:
        raise MwbError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose another --port") from None
    h, p = server.server_address[:2]
    click.echo(f"serving {name} on http://{h}:{p}/v1 (POST /v1/completions, POST /v1/chat/completions, "
               f"GET /v1/models); chat format: {chat_format.source}; up to {batch_rows} rows batched, "
               f"{max_queue} queued; Ctrl-C stops", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.server_close()
