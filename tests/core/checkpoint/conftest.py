"""One multi-rank checkpoint for the whole checkpoint suite (spawning 4 ranks is the expensive part).

It is saved at TP2×PP2 when the pipeline package is present (TP2×DP2 with the distributed optimizer
otherwise), after 2 training steps of a tiny GPT; the saving run also probes the same-layout resume.
"""
from __future__ import annotations

import pytest

from tests.core.checkpoint.ckpt_workers import SAVE_LAYOUT, tree


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """``{"path", "step", "first", "second"}`` from :func:`ckpt_workers.save_then_continue` at 4 ranks."""
    from tests.core.checkpoint.ckpt_workers import save_then_continue
    from tests.helpers.distributed import run_ranks

    root = str(tmp_path_factory.mktemp("ckpt4") / "checkpoints")
    return run_ranks(save_then_continue, 4, tree(**SAVE_LAYOUT), root)[0]
