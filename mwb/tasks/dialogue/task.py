"""``dialogue``: generative dialogue fine-tuning, context → next turn, with actor references and/or knowledge.

Data: chitchat's ``dataset.json`` (default: the one the ``chitchat-dataset`` package carries; splits by
conversation: train, dev, test, plus ``unseen_actors``, the conversations of a held-out set of actors) or a
Wizard-of-Wikipedia directory / file (``train.json``; ``seen`` = ``test_random_split.json``, ``unseen`` =
``test_topic_split.json``; dev = ``valid_random_split.json`` when present, else seen); the Wizard's turns
are the responses. Inputs: :mod:`.examples` (``--actors``: k reference utterances of the responding actor
from *other* conversations, Boyd et al. 2020, or with ``--reference-actor other`` another actor's, the
control; ``--knowledge``: top-k passages retrieved for the context,
Santhanam et al. 2020). ``--references 0`` / ``--top-k 0`` are the baselines on the same examples.
Objective: generative, the loss on the response only. Metrics: dev response perplexity (fine-tuning),
unigram F1 and KF1 of greedy replies (:mod:`.metrics`), with ``--actors`` the
actor-ID consistency of the replies (:mod:`.actor_ranker`), and with ``--reply-ppl`` the perplexity of every
evaluated gold reply under the evaluated model (``reply_ppl``; per reply in ``predictions.jsonl``, so two
runs on the same replies pair item by item, which the dev loss during fine-tuning does not).
"""
from __future__ import annotations

import json
import os

from mwb.core.config import ConfigError
from mwb.core.errors import DataError

from ..api import base
from ..api.registry import register
from ..api.objectives import GENERATIVE
from ..api.finetuning_spec import Finetuning, RealScale
from . import data as dd
from . import examples as ex
from .knowledge_sources import knowledge_path
from .reply_ppl import attach_reply_ids, score_replies, split_results
from .scoring import METRICS, consistency, reply_records


@register("dialogue")
class Dialogue(base.Task):
    description = "dialogue: context → next turn (chitchat / Wizard of Wikipedia), --actors | --knowledge; F1, KF1"
    objective = GENERATIVE
    metric = "f1"
    # From SmolLM2-135M (LoRA) 2,000 examples would be 125 steps of ~15 s single-threaded: the no-argument run
    # trains one epoch on 160 (10 steps at 128 tokens: three turns of context and the reply) and scores 48 dev
    # replies; from the tiny GPT, the options' defaults (2,000 / 200), 3 epochs.
    finetuning = Finetuning(real=RealScale(config={"train": {"seq_length": 128}}, epochs=1,
                                           task_opts={"train_examples": 160, "eval_examples": 48}))
    options = {**base.Task.options,
               "actors": base.Option(bool, False, "Condition on reference utterances of the responding actor."),
               "knowledge": base.Option(bool, False, "Condition on passages retrieved for the context."),
               "references": base.Option(int, 3, low=0,
                                         help="Reference utterances per example with --actors (0: none)."),
               "reference_actor": base.Option(str, "self", choices=("self", "other"),
                                              help="Whose reference utterances with --actors: the responding "
                                                   "actor's ('self') or another actor's, not in the conversation "
                                                   "('other': the control, same place and count)."),
               "top_k": base.Option(int, 1, low=0, help="Retrieved passages in the prompt with --knowledge (0: none)."),
               "evidence": base.Option(str, None, "Knowledge TSV (id, text, title), 'wordnet' (WordNet glosses), "
                                                   "'wordnet+bundled' (both) or 'bundled' (Wikipedia sample, the "
                                                   "default)."),
               "retriever": base.Option(str, "bm25", choices=("bm25", "dpr"), help="Knowledge retriever: bm25 or dpr."),
               "gold_knowledge": base.Option(bool, False, "WoW: show the gold checked sentence (oracle)."),
               "random_knowledge": base.Option(bool, False, "Show --top-k passages drawn at random from the same "
                                               "evidence instead of the retrieved ones (never one retrieved for "
                                               "the example); KF1 stays against the retrieved passage: the "
                                               "control for grounding."),
               "knowledge_seed": base.Option(int, 0, low=0, help="Seed of the --random-knowledge draw (per "
                                                                   "example: this seed and the example's id)."),
               "train_knowledge": base.Option(str, "context", choices=("context", "response"),
                                              help="Training passages retrieved with the context, or "
                                                   "with the gold 'response' (posterior selection: the passage the "
                                                   "reply draws on, as WoW's checked sentence). Evaluation: context."),
               "context_turns": base.Option(int, 3, low=1, help="Turns of context before the response."),
               "min_conversations": base.Option(int, 5, low=1,
                                                help="chitchat: responders need this many conversations."),
               "held_out_actors": base.Option(float, 0.1, low=0.0, high=1.0,
                                              help="chitchat: share of actors held out of training."),
               "train_examples": base.Option(int, 2000, low=0, help="Training examples (0: all)."),
               "eval_examples": base.Option(int, 200, low=0, help="Examples of an evaluation split (0: all)."),
               "sample_seed": base.Option(int, 0, low=0, help="Which hashed sample --train-examples and "
                                                                "--eval-examples take (0: the default order)."),
               "ranker_candidates": base.Option(int, 5, low=0, help="Actor-ID consistency among N actors (0: off)."),
               "reply_ppl": base.Option(bool, False, "Also score each gold reply under the evaluated GPT: "
                                                     "reply_ppl, with each reply's NLL and token count in "
                                                     "predictions.jsonl (pairs across runs)."),
               "max_tokens": base.Option(int, 32, low=1, help="Longest generated reply."),
               "first_line": base.Option(bool, True, "Keep the first line of each reply.")}

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        self._read: dict = {}
        self.index: dict = {}
        if self.opts["retriever"] not in ("bm25", "dpr"):
            raise ConfigError(f"--retriever must be bm25 or dpr, not {self.opts['retriever']!r}")
        if self.opts["train_knowledge"] not in ("context", "response"):
            raise ConfigError(f"--train-knowledge must be context or response, not {self.opts['train_knowledge']!r}")

    def data_path(self, path):
        return path or dd.chitchat_path()

    def conversations(self, path: str, split: str) -> tuple[list[dict], list[dict], object]:
        """(conversations of ``split``, all conversations for the reference index, responder filter)."""
        if dd.is_wow(path):
            if split == "dev" and os.path.isdir(path) and \
                    not os.path.isfile(os.path.join(path, dd.WOW_FILES["valid_seen"])):
                split = "seen"
            convs = dd.read_wow(dd.wow_file(path, split))
            return convs, convs, {"responder": "Wizard"}
        convs, parts, per = dd.chitchat_splits(path, self.opts["held_out_actors"])
        if split not in parts:
            raise DataError(f"chitchat has splits {', '.join(parts)}, not '{split}'")
        eligible = {a for a, n in per.items() if n >= self.opts["min_conversations"]}
        return parts[split], convs, {"eligible": eligible}

    def read(self, path: str, split: str) -> list[dict]:
        if (path, split) in self._read:
            return self._read[(path, split)]
        o = self.opts
        convs, everything, which = self.conversations(path, split)
        self.index = dd.utterances_by_actor(everything)
        items = ex.candidates(convs, o["context_turns"], **which, sample_seed=o["sample_seed"])
        limit = o["train_examples"] if split == self.train_split else o["eval_examples"]
        items = items[:limit] if limit else items
        if not items:
            raise DataError(f"{path}: no dialogue responses in split '{split}'")
        knowledge = None
        if o["knowledge"] and not o["gold_knowledge"]:
            by_response = split == self.train_split and o["train_knowledge"] == "response"
            queries = [it["response"].text if by_response else ex.query_text(it["context"]) for it in items]
            knowledge = ex.retrieve(queries, knowledge_path(o["evidence"]), o["retriever"], max(o["top_k"], 1))
        drawn = None
        if o["knowledge"] and o["random_knowledge"]:
            if knowledge is None:
                raise ConfigError("--random-knowledge replaces retrieved passages; it does not apply with "
                                  "--gold-knowledge")
            keys = [f"{it['conversation']}:{it['turn']}" for it in items]
            drawn = ex.draw_passages(keys, knowledge_path(o["evidence"]), o["top_k"], o["knowledge_seed"], knowledge)
        refs = o["references"] if o["actors"] else 0
        out = ex.build(items, self.index, refs, knowledge, o["top_k"] if o["knowledge"] else 0,
                       o["gold_knowledge"], drawn, o["reference_actor"])
        self._read[(path, split)] = out
        return out

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        return {"prompt": example["prompt"], "target": " " + example["target"].strip()}

    def build(self, examples: list[dict], runner) -> list:
        """The objective's generation items; with ``--reply-ppl`` each also carries its prompt's and gold reply's
        token ids (:mod:`.reply_ppl`), so whichever rank runs an item scores its reply too."""
        items = super().build(examples, runner)
        if self.opts["reply_ppl"]:
            attach_reply_ids(items, [self.inputs(e, None, 0) for e in examples], runner)
        return items

    def run(self, runner, items) -> list:
        """Greedy replies (the objective's); with ``--reply-ppl``, ``{"reply", "nll", "tokens"}`` per item."""
        replies = super().run(runner, items)
        return score_replies(runner, replies, items) if self.opts["reply_ppl"] else replies

    metric_specs = METRICS

    def outcome(self, preds: list, examples: list[dict]) -> tuple[list[dict], dict]:
        """Records and summary from one pass: the actor ranker (``--actors``, ``--ranker-candidates`` > 1)
        scores the replies once, giving both the per-reply ``consistency`` hits and the summary's
        ``consistency_chance`` / ``consistency_n`` / ``consistency_count``; ``reply_tokens`` sums the scored
        gold-reply tokens."""
        replies, scored = split_results(preds)
        found, hits = consistency(self.opts, self.index, replies, examples)
        records = reply_records(replies, scored, examples, hits)
        summary = {} if scored is None else {"reply_tokens": sum(t for _, t in scored)}
        # the ranker's own means of the hits are the records' "consistency" metrics, aggregated from them
        return records, {**summary, **{k: v for k, v in found.items() if k not in hits}}

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per response (id: ``conversation:turn``): unigram ``f1`` against the gold reply and, when the
        examples have knowledge, ``kf1`` against it (the passage itself as ``knowledge``, so a record can be
        rescored on its own); with ``--reply-ppl``, ``reply_ppl``'s parts (the gold reply's summed NLL and token
        count); with the actor ranker, ``consistency`` / ``consistency_gold`` 0/1 (was the reply's / the gold
        reply's actor picked) for the replies whose actor has a profile — the corpus numbers are their means
        (``reply_ppl``: exp of summed NLL over summed tokens)."""
        return self.outcome(preds, examples)[0]

    def files(self, metrics: dict, records: list[dict], examples: list[dict]) -> dict[str, str]:
        """``replies.jsonl`` beside results.json: every evaluated prompt, its generated and its gold reply."""
        rows = [{"actor": e.get("actor"), "prompt": e["prompt"], "reply": r["prediction"], "gold": e["target"]}
                for r, e in zip(records, examples)]
        return {"replies.jsonl": "".join(json.dumps(r) + "\n" for r in rows)}

