"""Generative objectives: prompt → target with a GPT or a T5, trained on the shared trainer, scored by generation.

Training samples. GPT: ``tokens = prompt + target + [eod]`` padded to ``seq_length + 1``, with a loss mask
that is 1 only on the target tokens and the closing eod, so the loss counts target tokens only (the prompt
is context, as in instruction tuning). A prompt that does not fit loses its *beginning* (the end is nearest
the target); a target that does not fit is cut. T5: the encoder reads ``prompt + [eos]``, the decoder reads
``[bos] + target`` and predicts ``target + [eos]`` — the special tokens T5 pretraining uses
(:mod:`mwb.core.data.t5`). Decoder lengths are rounded up to a multiple of 8 so sequence parallelism can
split them (padding is masked out of attention and loss).

Both run on the pretraining specs (:class:`~mwb.core.training.model_spec.GPTSpec`, ``T5Spec``), so every layout the
trainer has (TP/SP/PP/DP, the distributed optimizer, precision, accumulation) applies; the pretrained
weights are copied into each rank's chunk when it is built, before the optimizer takes its fp32 masters.

Evaluation decodes greedily (or by beam search, for tasks with a ``num_beams`` option) through the batched
generation paths (:mod:`mwb.evaluation.generation` for GPT,
:mod:`mwb.evaluation.seq2seq` for T5) and hands the texts to the task's ``metrics``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from mwb.core.compose import load_full_model
from mwb.core.config import ConfigError, RunConfig
from mwb.core.data.t5 import end_and_start_ids
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.model_spec import GPTSpec, PaddingMetric
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.lm import LanguageModel
from mwb.evaluation.seq2seq import Seq2SeqModel, generate_seq2seq  # noqa: F401  (the T5 runner)
from mwb.pretraining.t5 import T5Spec

from .encoder_model import copy_available
from .finetuning_spec import GENERATIVE_ARCHES as ARCHES


def _texts(task, example: dict) -> tuple[str, str]:
    x = task.inputs(example, None, 0)
    return x["prompt"], x.get("target", "")


def t5_specials(tok) -> tuple[int, int, int]:
    """(bos, eos, pad) as T5 pretraining chooses them."""
    tok.require("pad", purpose="T5")
    eos, bos = end_and_start_ids(tok)
    return bos, eos, tok.pad


def gpt_sample(prompt: Sequence[int], target: Sequence[int], seq_length: int, eod: int) -> dict:
    """``tokens [seq_length + 1]`` and ``loss_mask`` (1 where the token is a target to predict)."""
    target = list(target)[:seq_length] + [eod]
    target = target[:seq_length]
    keep = max(seq_length + 1 - len(target), 1)
    prompt = list(prompt)[-keep:] if prompt else [eod]  # an empty prompt: predict the target from eod
    ids = (prompt + target)[: seq_length + 1]
    mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
    pad = seq_length + 1 - len(ids)
    return {"tokens": np.array(ids + [eod] * pad, dtype=np.int64),
            "loss_mask": np.array(mask + [0] * pad, dtype=np.int64)}


def t5_sample(source: Sequence[int], target: Sequence[int], enc_length: int, dec_length: int, tok) -> dict:
    bos, eos, pad = t5_specials(tok)
    enc = list(source)[: enc_length - 1] + [eos]
    labels = list(target)[: dec_length - 1] + [eos]
    dec = [bos] + labels[:-1]

    def padded(x, n, value):
        return np.array(list(x) + [value] * (n - len(x)), dtype=np.int64)
    return {"enc_tokens": padded(enc, enc_length, pad), "enc_padding_mask": padded([1] * len(enc), enc_length, 0),
            "dec_tokens": padded(dec, dec_length, pad), "labels": padded(labels, dec_length, -1),
            "loss_mask": padded([1] * len(labels), dec_length, 0),
            "dec_padding_mask": padded([1] * len(dec), dec_length, 0)}


def decoder_length(task, examples: list[dict], tok, cap: int) -> int:
    """The T5 decoder length: the longest target + eos over ``examples`` (≤ ``cap``), a multiple of 8."""
    longest = max((len(tok.encode(_texts(task, e)[1])) + 1 for e in examples), default=1)
    return -(-min(longest, cap) // 8) * 8


def featurize(task, examples: list[dict], tok, seq_length: int, arch: str, dec_length: int = 0) -> list[dict]:
    out = []
    for e in examples:
        if arch == "t5":
            prompt, target = _texts(task, e)
            out.append(t5_sample(tok.encode(prompt), tok.encode(target), seq_length, dec_length, tok))
        else:
            if tok.eod is None:
                raise ConfigError(f"generative fine-tuning needs an end-of-document token; {tok.path} has none")
            out.append(task.gpt_sample(e, tok, seq_length))
    return out


class _Pretrained:
    """Mixin: copy the pretrained checkpoint's tensors into each chunk as it is built."""

    def __init__(self, cfg: RunConfig, vocab_size: int, task, tensors: Optional[dict], source: str) -> None:
        super().__init__(cfg, vocab_size)
        self.task, self.tensors, self.source = task, tensors, source
        self.missing: list[str] = []

    def build_chunk(self, state, stage, device, dtype):
        chunk = super().build_chunk(state, stage, device, dtype)
        if self.tensors is not None:
            copy_available([chunk], self.tensors, self.vocab_size, self.cfg.model.tie_embeddings, self.source,
                           self.missing)
        return chunk


class GenerativeGPTSpec(_Pretrained, PaddingMetric, GPTSpec):
    pass


class GenerativeT5Spec(_Pretrained, T5Spec):
    pass


def make_spec(task, cfg: RunConfig, vocab: int, tensors: dict, source: str):
    return (GenerativeT5Spec if cfg.model.arch == "t5" else GenerativeGPTSpec)(cfg, vocab, task, tensors, source)


# -------------------------------------------------------------------------------------------- harness


def load_model(task, checkpoint: str, tokenizer: Optional[str] = None, device=None):
    """A GPT as a :class:`~mwb.evaluation.lm.LanguageModel`, or a T5 as a :class:`Seq2SeqModel`."""
    cfg, model, stored = load_full_model(checkpoint, device=device or "cpu")
    if cfg.model.arch not in ARCHES:
        raise ConfigError(f"{checkpoint} holds a '{cfg.model.arch}' model; task '{task.name}' generates with a "
                          f"GPT or a T5")
    if not (tokenizer or stored):
        raise ConfigError(f"{checkpoint} names no tokenizer: pass --tokenizer PATH")
    tok = load_tokenizer(tokenizer or stored)
    if cfg.model.arch == "gpt":
        return cfg, LanguageModel(model, tok)
    if task.option("seq_length") is None:  # the encoder length the model was trained at
        task.decide(seq_length=cfg.train.seq_length)
    return cfg, Seq2SeqModel(model, tok)


def build(task, examples: list[dict], runner) -> list[dict]:
    tok = runner.tokenizer
    max_tokens = task.generation().max_tokens
    items = []
    for e in examples:
        ids = tok.encode(_texts(task, e)[0])
        if runner.encoder_decoder:  # T5: the encoder input as in training: cut, then the end token
            ids = ids[: task.option("seq_length") - 1] + [runner.eod]
        else:  # GPT: a prompt longer than the context loses its beginning, as in training (gpt_sample)
            room = max(runner.max_length - max_tokens, 1)
            ids = ids[-room:]
        items.append({"prompt": ids or [runner.eod]})
    return items


def run(task, runner, items) -> list[str]:
    """Greedy (or, with a task's ``num_beams`` > 1, beam-search) generations through the batched generation
    path, stripped; ``first_line`` keeps the first line."""
    g = task.generation()
    params = SamplingParams(max_tokens=g.max_tokens, temperature=0.0, stop=("\n",) if g.first_line else (),
                            num_beams=g.num_beams, length_penalty=g.length_penalty,
                            no_repeat_ngram_size=g.no_repeat_ngram)
    prompts, batch = [it["prompt"] for it in items], g.batch_size
    if runner.encoder_decoder:
        gens = generate_seq2seq(runner, runner.tokenizer, prompts, params, batch_size=batch)
    else:
        gens = generate(runner, prompts, params, batch_size=batch)
    return [g.text.strip() for g in gens]
