"""``mwb serve --nproc N``: one model split over N tensor-parallel ranks behind one HTTP server.

Every rank loads its shard of the checkpoint (the same full tensors, sliced by the TP plan) and runs the same
serving engine (:mod:`.engine`): TP rank 0 serves HTTP and schedules, the others follow its plan step by
step. Stopping: rank 0 takes SIGINT/SIGTERM as "close" and tells the followers, which only note those
signals themselves (stopping on their own would leave rank 0 waiting in a collective).
"""
from __future__ import annotations

import signal
import sys
from typing import Optional

from mwb.core.checkpoint.reader import copy_full_tensors
from mwb.core.compose import build_model, full_state
from mwb.core.config import ConfigError
from mwb.core.errors import MwbError
from mwb.core.parallel import ParallelDims, build_state
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.launch import init_distributed, note_stop_signal

from .chat_format import chat_format_for
from .engine import EngineConfig, ServingEngine
from .lm import LanguageModel
from .openai_requests import Limits
from .server import make_server


def load_sharded_language_model(checkpoint: str, tokenizer: Optional[str], state, device,
                                pack_weights: Optional[bool] = None) -> LanguageModel:
    """This rank's tensor-parallel shard of a GPT checkpoint, as a :class:`LanguageModel`; ``pack_weights``
    (default: on CPU) packs its linears for oneDNN (:mod:`mwb.core.models.packed_linear`)."""
    cfg, vocab, tensors, stored = full_state(checkpoint)
    if cfg.model.arch != "gpt":
        raise ConfigError(f"{checkpoint} holds a '{cfg.model.arch}' model; serving needs a GPT (decoder-only) model")
    tok_path = tokenizer or stored
    if not tok_path:
        raise ConfigError(f"{checkpoint} names no tokenizer: pass --tokenizer PATH")
    model = build_model(cfg.model, state, vocab, cfg.train.seed, device)

    def get(name):
        if name not in tensors:
            raise ConfigError(f"{checkpoint} has no tensor {name} (its model settings differ)")
        return tensors[name]
    copy_full_tensors([model], get, vocab, cfg.model.tie_embeddings, source=str(checkpoint))
    return LanguageModel(model.eval(), load_tokenizer(tok_path), state=state, device=device,
                         pack_weights=pack_weights)


def _noted(signum, frame):
    """A follower: the stop is rank 0's to make; only note it, so the rank exits at once when done
    (:func:`~mwb.core.training.launch.note_stop_signal`: the launcher no longer collects return values)."""
    note_stop_signal(signum)


def _stop(signum, frame):
    """Rank 0: the first SIGINT/SIGTERM stops serving; later ones (the launcher passes signals on) are only
    noted, so they cannot interrupt the shutdown that tells the other ranks to stop."""
    note_stop_signal(signum)
    signal.signal(signal.SIGINT, _noted)
    signal.signal(signal.SIGTERM, _noted)
    raise KeyboardInterrupt


def serve_rank(checkpoint: str, tokenizer: Optional[str], host: str, port: int, model_name: str, limits: Limits,
               config: EngineConfig, quiet: bool, pack_weights: Optional[bool] = None) -> None:
    """One rank of ``mwb serve --nproc N`` (TP = N)."""
    rank, world, device = init_distributed()
    state = build_state(ParallelDims(world_size=world, tp=world))
    leader = state.tp_rank == 0
    if not leader:
        signal.signal(signal.SIGINT, _noted)
        signal.signal(signal.SIGTERM, _noted)
    lm = load_sharded_language_model(checkpoint, tokenizer, state, device, pack_weights)
    engine = ServingEngine(lm, config, start=False)
    if not leader:
        engine.follow()
        return
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        chat_format = chat_format_for(tokenizer or lm.tokenizer.path)
        server = make_server(lm, host, port, model_name, limits, quiet=quiet, chat_format=chat_format, engine=engine)
    except OSError as e:
        raise MwbError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose another --port") from None
    except BaseException:
        engine.close()
        raise
    engine.start()
    h, p = server.server_address[:2]
    print(f"serving {model_name} on http://{h}:{p}/v1 (POST /v1/completions, POST /v1/chat/completions, "
          f"GET /v1/models) over {world} tensor-parallel ranks; chat format: {chat_format.source}; up to "
          f"{config.batch_rows} rows batched, {config.max_queue} queued; Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr, flush=True)
    finally:
        server.server_close()  # closes the engine: the followers return
