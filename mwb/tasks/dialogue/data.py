"""Conversations in one turn format, from chitchat and Wizard of Wikipedia, with splits by conversation and
a held-out set of actors.

Why one module: the multi-actor model, the knowledge-grounded agent, MSDP prompting and ``mwb chat`` all read
the same conversations; a :class:`Turn` is what they share. A conversation is ``{"id": str, "turns":
[Turn, ...]}``.

Readers:

* chitchat (``chitchat-dataset`` 0.9.0, ``dataset.json``): ``{conversation id: {"messages": [[message, ...],
  ...], "prompt", "ratings", "start"}}``; each inner list is one speaker's consecutive messages
  (``{"text", "sender", "timestamp"}``), joined with a space into one turn. ``sender`` is a stable actor id
  across conversations: the multi-actor model's actors.
* Wizard of Wikipedia (ParlAI's release: ``train.json``, ``test_random_split.json`` = seen,
  ``test_topic_split.json`` = unseen): a JSON list of dialogues ``{"chosen_topic", "dialog": [{"speaker":
  "0_Wizard"|"1_Apprentice", "text", "checked_sentence": {key: sentence}, "checked_passage": {key: title},
  ...}]}``. A wizard turn's knowledge is its checked sentence (none when ``no_passages_used``); its topic is
  the checked passage's title, else the dialogue's ``chosen_topic`` (the rule of Megatron's MSDP preprocessing).

Splits are by conversation (a hash of its id, so adding conversations never moves existing ones), and
held-out actors likewise by a hash of the actor id; a conversation with a held-out actor in it never
reaches training.
"""
from __future__ import annotations

import functools
import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator, Optional

from mwb.core.errors import DataError

from ..api.formats.checks import nonempty, read_json, shown, text

NO_KNOWLEDGE = "no_passages_used"
WOW_FILES = {"train": "train.json", "seen": "test_random_split.json", "unseen": "test_topic_split.json",
             "valid_seen": "valid_random_split.json", "valid_unseen": "valid_topic_split.json"}
WOW_SPLIT_ALIASES = {"test": "seen", "dev": "valid_seen", "test_seen": "seen", "test_unseen": "unseen"}


@dataclass(frozen=True)
class Turn:
    """One turn: who spoke, what they said, and (knowledge-grounded data) the knowledge and topic behind it."""
    speaker: str
    text: str
    knowledge: Optional[str] = None
    topic: Optional[str] = None


# ------------------------------------------------------------------------------------------- readers


def _load_json(path: str, what: str):
    if not os.path.isfile(path):
        raise DataError(f"{what} file not found: {path}")
    return read_json(path)


def chitchat_path() -> str:
    from mwb.core.data.package_files import package_path
    return package_path("chitchat")


def read_chitchat(path: Optional[str] = None) -> list[dict]:
    """Conversations of the chitchat ``dataset.json`` (default: the one in the ``chitchat-dataset`` package)."""
    path = path or chitchat_path()
    data = _load_json(path, "chitchat dataset.json")
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object of conversations (chitchat's dataset.json)")
    out = []
    for cid, conv in data.items():
        groups = conv.get("messages") if isinstance(conv, dict) else None
        if not isinstance(groups, list):
            raise DataError(f"{path}: conversation {cid} has no 'messages' list")
        turns = []
        for g, group in enumerate(groups):
            where = f"{path}: conversation {cid}: messages[{g}]"
            if not isinstance(group, list) or not all(isinstance(m, dict) for m in group):
                raise DataError(f"{where}: expected a list of message objects, got {shown(group)}")
            msgs = [m for m in group if text(m, "text", where, default="")]
            if not msgs:
                continue
            senders = [text(m, "sender", where, empty=False) for m in msgs]
            turns.append(Turn(speaker=senders[0], text=" ".join(m["text"].strip() for m in msgs)))
        if turns:
            out.append({"id": str(cid), "turns": turns})
    return nonempty(out, path, "conversations")


def wow_file(path: str, split: str) -> str:
    """The official WoW file of ``split`` (train, seen, unseen, valid_seen, valid_unseen) in directory ``path``,
    or ``path`` itself when it is a file."""
    if os.path.isfile(path):
        return path
    split = WOW_SPLIT_ALIASES.get(split, split)
    if split not in WOW_FILES:
        raise DataError(f"unknown Wizard of Wikipedia split '{split}' ({', '.join(WOW_FILES)})")
    f = os.path.join(path, WOW_FILES[split])
    if not os.path.isfile(f):
        raise DataError(f"{f} not found: a Wizard of Wikipedia directory holds {', '.join(WOW_FILES.values())}")
    return f


def _single_value(d, where: str) -> Optional[str]:
    if not d:
        return None
    if not isinstance(d, dict):
        raise DataError(f"{where}: expected an object {{key: text}}")
    values = list(d.values())
    if not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: expected an object {{key: text}} of strings, got {shown(d)}")
    return values[0] if len(values) == 1 and values[0] != NO_KNOWLEDGE else None


def read_wow(path: str) -> list[dict]:
    """Conversations of one official Wizard-of-Wikipedia JSON file; speakers ``Wizard`` / ``Apprentice``."""
    data = _load_json(path, "Wizard of Wikipedia JSON (a list of dialogues)")
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of dialogues (Wizard of Wikipedia format)")
    out = []
    for n, sample in enumerate(data):
        where = f"{path}: dialogue {n}"
        if not isinstance(sample, dict) or not isinstance(sample.get("dialog"), list):
            raise DataError(f"{where} has no 'dialog' list")
        chosen = text(sample, "chosen_topic", where, default=None)
        turns = []
        for i, t in enumerate(sample["dialog"]):
            at = f"{where}: dialog[{i}]"
            if not isinstance(t, dict):
                raise DataError(f"{at}: a turn is an object with 'speaker' and 'text', got {shown(t)}")
            speaker = text(t, "speaker", at, empty=False).split("_", 1)[-1]
            text(t, "text", at)
            knowledge = topic = None
            if "wizard" in speaker.lower():
                knowledge = _single_value(t.get("checked_sentence"), where)
                topic = _single_value(t.get("checked_passage"), where) or chosen
            turns.append(Turn(speaker=speaker, text=t["text"].strip(), knowledge=knowledge, topic=topic))
        out.append({"id": f"wow-{n}", "turns": turns, "topic": chosen})
    return nonempty(out, path, "dialogues")


# --------------------------------------------------------------------------------------------- splits


def bucket(key: str, salt: str = "") -> float:
    """A stable number in [0, 1) from ``key`` (md5), the same on every machine and Python."""
    h = hashlib.md5(f"{salt}:{key}".encode()).hexdigest()
    return int(h[:12], 16) / 16 ** 12


def held_out_actors(conversations: list[dict], fraction: float, salt: str = "actors") -> set[str]:
    """About ``fraction`` of the speakers, chosen by a hash of their id."""
    speakers = {t.speaker for c in conversations for t in c["turns"]}
    return {s for s in speakers if bucket(s, salt) < fraction}


def split_conversations(conversations: list[dict], dev: float = 0.05, test: float = 0.05,
                        held_out: frozenset = frozenset(), salt: str = "split") -> dict[str, list[dict]]:
    """``{"train", "dev", "test", "unseen_actors"}``: conversations with a held-out actor go to
    ``unseen_actors``; the others to train/dev/test by a hash of their id."""
    out: dict[str, list[dict]] = {"train": [], "dev": [], "test": [], "unseen_actors": []}
    for c in conversations:
        if any(t.speaker in held_out for t in c["turns"]):
            out["unseen_actors"].append(c)
            continue
        b = bucket(c["id"], salt)
        out["dev" if b < dev else "test" if b < dev + test else "train"].append(c)
    return out


# ------------------------------------------------------------------------------ responses and actors


def responses(conversation: dict, context_turns: int) -> Iterator[tuple[list[Turn], Turn]]:
    """``(context, response)`` for every turn after the first: the last ``context_turns`` turns before it."""
    turns = conversation["turns"]
    for i in range(1, len(turns)):
        yield turns[max(0, i - context_turns):i], turns[i]


def utterances_by_actor(conversations: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """``{actor: [(conversation id, text), ...]}`` in reading order."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for c in conversations:
        for t in c["turns"]:
            out[t.speaker].append((c["id"], t.text))
    return dict(out)


def references(index: dict, actor: str, exclude, k: int, seed: str) -> list[str]:
    """``k`` utterances of ``actor`` from conversations other than ``exclude`` (an id, or a set of ids),
    picked by a seeded hash (the same example always gets the same references); fewer if the actor has fewer."""
    excluded = {exclude} if isinstance(exclude, str) else set(exclude)
    pool = [text for cid, text in index.get(actor, ()) if cid not in excluded]
    return sorted(pool, key=lambda text: bucket(text, seed))[:k]


def other_actor(index: dict, actor: str, speakers, exclude: str, k: int, seed: str) -> Optional[str]:
    """Another actor for ``actor``'s reference slot: not ``actor``, not one of ``speakers`` (the evaluated
    conversation's), with at least ``k`` utterances outside conversation ``exclude``, picked by a seeded hash
    (the same example always gets the same one). Why: the control for actor references shows as much in-domain
    text in the same place, only not the responder's, so a gain over it is the actor's and not more text's.
    None when no actor qualifies."""
    banned = set(speakers) | {actor}
    pool = [a for a, utts in index.items()
            if a not in banned and sum(cid != exclude for cid, _ in utts) >= k]
    return min(pool, key=lambda a: bucket(a, seed)) if pool else None


def conversations_per_actor(conversations: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for c in conversations:
        for s in {t.speaker for t in c["turns"]}:
            counts[s] += 1
    return dict(counts)


def is_wow(path: str) -> bool:
    """A directory or a JSON list is Wizard of Wikipedia; a JSON object is chitchat."""
    if os.path.isdir(path):
        return True
    if not os.path.isfile(path):
        raise DataError(f"dialogue data not found: {path}")
    with open(path, "rb") as f:  # bytes: a cut multi-byte character is not an error here
        head = f.read(4096).lstrip()
    return head.startswith(b"[")


@functools.lru_cache(maxsize=2)
def chitchat_splits(path: str, held_out: float) -> tuple[list, dict, dict]:
    """chitchat read once per process: (conversations, splits, conversations per actor)."""
    convs = read_chitchat(path)
    parts = split_conversations(convs, held_out=frozenset(held_out_actors(convs, held_out)))
    return convs, parts, conversations_per_actor(convs)
