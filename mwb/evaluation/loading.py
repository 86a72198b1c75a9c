"""From ``--checkpoint`` to a :class:`~mwb.evaluation.lm.LanguageModel`, for the eval/generate/serve CLIs.

Why here and not in each command: the three commands accept the same things (an mwb run directory,
``checkpoints/latest``, ``step_N``, a consolidated ``.safetensors`` file or a Hugging Face model directory,
all through :func:`mwb.core.compose.load_full_model`), fall back the same way when ``--checkpoint`` is
missing (the newest ``runs/pretrain-gpt-*`` run, said out loud), and fail with the same clear messages.
"""
from __future__ import annotations

from typing import Callable, Optional

from mwb.core.config import ConfigError
from mwb.core.training.run_dir import latest_run

NO_CHECKPOINT = ("no --checkpoint given and no runs/pretrain-gpt-* run with a checkpoint in the current "
                 "directory: pass --checkpoint DIR (an mwb run or checkpoint directory, or a Hugging Face "
                 "model directory with its tokenizer), or train one with `mwb pretrain gpt`")


def latest_gpt_run(root: str = "runs") -> Optional[str]:
    """The most recently modified ``runs/pretrain-gpt-<time>`` directory that holds a complete checkpoint
    (the one run lookup, :func:`mwb.core.training.run_dir.latest_run`)."""
    return latest_run("pretrain-gpt", root)


def resolve_checkpoint(checkpoint: Optional[str], say: Callable[[str], None] = print) -> str:
    """``checkpoint`` itself, or the newest GPT pretraining run (announced through ``say``); a
    ConfigError (exit status 2) naming what to pass when there is neither."""
    if checkpoint:
        return checkpoint
    run = latest_gpt_run()
    if run is None:
        raise ConfigError(NO_CHECKPOINT)
    say(f"no --checkpoint given: using the newest GPT run {run}")
    return run


def load_language_model(checkpoint: str, tokenizer: Optional[str] = None, device=None,
                        pack_weights: Optional[bool] = None):
    """``(run config, LanguageModel)`` for a GPT checkpoint; ``tokenizer`` overrides the stored one.
    ``pack_weights`` (default: on CPU) packs the linears for oneDNN (:mod:`mwb.core.models.packed_linear`):
    the model is loaded for inference only."""
    import torch

    from mwb.core.compose import load_full_model
    from mwb.core.tokenizers import load_tokenizer

    from .lm import LanguageModel

    device = device or (torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    cfg, model, stored = load_full_model(checkpoint, device=device)
    if cfg.model.arch != "gpt":
        raise ConfigError(f"{checkpoint} holds a '{cfg.model.arch}' model; zero-shot evaluation, generation and "
                          f"serving need a GPT (decoder-only) model")
    tok_path = tokenizer or stored
    if not tok_path:
        raise ConfigError(f"{checkpoint} names no tokenizer: pass --tokenizer PATH")
    tok = load_tokenizer(tok_path)
    return cfg, LanguageModel(model, tok, device=device, pack_weights=pack_weights)
