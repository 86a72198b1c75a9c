"""One ``mwb finetune dialogue`` cell, shared by the dialogue reproductions (``knowledge-agent``, ``multi-actor``).

Both run the same cell: at smoke scale a 1-step tiny GPT pretrained in the cell, then one fine-tuning run on
chitchat's hashed sample of conversations (``--sample-seed k``) with greedy replies to held-out ones, differing
only in the condition's flags (knowledge passages or actor references). After the cell is read, its fine-tuned
weights are deleted: 2 GB a cell at SmolLM2's size, while the replies, their records and ``results.json`` are
what the report uses.
"""
from __future__ import annotations

import os
import shutil

from ..api import LOGGING, CellResult, Experiment


class DialogueCells(Experiment):
    """``cell_commands`` from :meth:`condition_flags`; ``run_cell`` that drops the cell's weights afterwards."""

    def condition_flags(self, condition: str, seed: int, scale, options: dict) -> list:
        """The ``mwb finetune dialogue`` flags that make ``condition`` (after ``--checkpoint``)."""
        raise NotImplementedError

    def cell_commands(self, condition, seed, scale, cell_dir, options) -> list:
        p = scale.params
        cmds, checkpoint = [], options.get("checkpoint") or p["checkpoint"]
        if checkpoint == "tiny":
            checkpoint = os.path.join(cell_dir, "base")
            cmds.append(["mwb", "pretrain", "gpt", "--steps", "1",
                         *[a for k, v in p["tiny_shape"].items() for a in ("--set", f"model.{k}={v}")],
                         "--global-batch-size", "4", "--micro-batch-size", "4", "--seq-length", str(p["seq"]),
                         "--eval-interval", "0", "--seed", str(seed), *LOGGING, "--out", checkpoint])
        train = ["mwb", "finetune", "dialogue", "--checkpoint", checkpoint,
                 *self.condition_flags(condition, seed, scale, options),
                 "--sample-seed", str(seed), "--train-examples", str(p["train"]), "--eval-examples", str(p["eval"]),
                 "--epochs", "1", "--global-batch-size", str(p["batch"]), "--micro-batch-size", str(p["micro"]),
                 "--seq-length", str(p["seq"]), "--lr", f"{p['lr']:g}", "--seed", str(seed),
                 "--max-tokens", str(p["max_tokens"])]
        if p.get("precision"):
            train += ["--precision", p["precision"]]
        if options.get("data"):
            train += ["--data", options["data"]]
        return cmds + [train + ["--keep-last", "1", *LOGGING, "--out", cell_dir]]

    def run_cell(self, condition, seed, scale, cell_dir, options, invoke) -> CellResult:
        """The cell's commands, its results read back, then its fine-tuned weights deleted."""
        res = super().run_cell(condition, seed, scale, cell_dir, options, invoke)
        for sub in ("checkpoints", "base"):
            shutil.rmtree(os.path.join(cell_dir, sub), ignore_errors=True)
        return res
