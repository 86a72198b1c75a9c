"""A joint checkpoint's two parts as checkpoints of their own: ``step_N/retriever`` (a bi-encoder any retrieval
command opens, with the scoring the run trained it with) and ``step_N/reader`` (the reader's own format), for
``mwb eval qa`` and for starting other runs from either part."""
from __future__ import annotations

import os
import tempfile

from mwb.core.checkpoint import write_model_checkpoint
from mwb.core.compose import full_state
from mwb.core.config import update

from ..loading import write_config_file


def export_parts(step_dir: str, cfg, plan, rcfg) -> None:
    """``step_dir/retriever`` (a bi-encoder checkpoint) and ``step_dir/reader`` (a reader checkpoint) from
    the joint checkpoint, whatever layout wrote it (rank 0 only)."""
    _, vocab, tensors, tok = full_state(step_dir)
    parts = {p: {k[len(p) + 1:]: v for k, v in tensors.items() if k.startswith(p + ".")}
             for p in ("retriever", "reader_model")}
    with tempfile.TemporaryDirectory() as d:
        write_model_checkpoint(os.path.join(step_dir, "retriever"), cfg, vocab, parts["retriever"],
                               extra_files={"tokenizer": tok, "biencoder": write_config_file(rcfg, d)},
                               overwrite=True)
    reader_cfg = update(cfg, {"model": plan.reader_model})
    write_model_checkpoint(os.path.join(step_dir, "reader"), reader_cfg, vocab, parts["reader_model"],
                           extra_files={"tokenizer": tok}, overwrite=True)
