"""Checkpoints of a training run: ``OUT/checkpoints/step_N/`` plus ``OUT/checkpoints/latest``.

Every rank writes only its own shards (safetensors) and rank 0 a ``metadata.json`` that says which slice of
which global tensor each piece is, so a checkpoint loads into any parallel layout (TP, PP, VPP, EP, DP,
distributed optimizer on or off), optimizer state included. A checkpoint is written under a temporary name
and renamed once complete, and ``latest`` is updated last, so an interrupted save never looks complete.
Nothing is unpickled on load. The format is described in ``docs/checkpoint.md``.

Trainer-facing API: ``save(trainer, root, keep_last, extra_files)`` (in the background with
``train.async_save``; ``wait_for_save(trainer)`` finishes it), ``prune(root, keep_last, keep)``,
``latest_dir(root)``, ``resume_dir(root)`` (the latest, checked complete, for pre-launch checks),
``load(trainer, directory, model_only=False) -> step``. Full tensors in one process and the one-file
consolidated format: :mod:`.consolidate`. A whole model from any checkpoint (or a Hugging Face directory) is
:func:`mwb.core.compose.load_full_model`, above this package: checkpoints know no model construction.
"""
from __future__ import annotations


from ..errors import CheckpointError
from .format import FORMAT, latest_dir, read_metadata, resume_dir
from .reader import Checkpoint, load
from .async_save import save, wait_for_save
from .writer import prune, write_model_checkpoint

__all__ = ["FORMAT", "Checkpoint", "CheckpointError", "latest_dir", "load", "prune", "read_metadata", "resume_dir",
           "save", "wait_for_save", "write_model_checkpoint"]
