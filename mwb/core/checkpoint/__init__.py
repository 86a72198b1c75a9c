"""Checkpoints of a training run: ``OUT/checkpoints/step_N/`` plus ``OUT/checkpoints/latest``.

A checkpoint is written under a temporary name and renamed only once every rank's file is complete, and
``latest`` is updated last, so an interrupted save never looks complete. Files are loaded with
``torch.load(weights_only=True)`` (no arbitrary unpickling).

This module is the trainer-facing interface (``save``, ``load``, ``latest_step``); the on-disk layout is
in :mod:`mwb.core.checkpoint.format`.
"""
from .format import CheckpointError, latest_dir, load, save

__all__ = ["CheckpointError", "latest_dir", "load", "save"]
