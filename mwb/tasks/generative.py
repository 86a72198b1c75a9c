"""Generative objectives: prompt → target with a GPT or a T5, trained on the shared trainer, scored by generation.

Training samples. GPT: ``tokens = prompt + target + [eod]`` padded to ``seq_length + 1``, with a loss mask
that is 1 only on the target tokens and the closing eod, so the loss counts target tokens only (the prompt
is context, as in instruction tuning). A prompt that does not fit loses its *beginning* (the end is nearest
the target); a target that does not fit is cut. T5: the encoder reads ``prompt + [eos]``, the decoder reads
``[bos] + target`` and predicts ``target + [eos]`` — the special tokens T5 pretraining uses
(:mod:`mwb.core.data.t5`). Decoder lengths are rounded up to a multiple of 8 so sequence parallelism can
split them (padding is masked out of attention and loss).

Both run on the pretraining specs (:class:`~mwb.core.training.spec.GPTSpec`, ``T5Spec``), so every layout the
trainer has (TP/SP/PP/DP, the distributed optimizer, precision, accumulation) applies; the pretrained
weights are copied into each rank's chunk when it is built, before the optimizer takes its fp32 masters.

Evaluation decodes greedily (GPT through the batched generation path of :mod:`mwb.evaluation.generation`;
T5 with :func:`t5_greedy`) and hands the texts to the task's ``metrics``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from mwb.core.compose import load_full_model
from mwb.core.compose import full_state
from mwb.core.config import ConfigError, RunConfig
from mwb.core.tokenizers import load_tokenizer
from mwb.core.training.spec import GPTSpec
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.loading import load_language_model
from mwb.pretraining.t5 import T5Spec

from .model import copy_available

ARCHES = ("gpt", "t5")


def _texts(task, example: dict) -> tuple[str, str]:
    x = task.inputs(example, None, 0)
    return x["prompt"], x.get("target", "")


def t5_specials(tok) -> tuple[int, int, int]:
    """(bos, eos, pad) as T5 pretraining chooses them."""
    tok.require("pad", purpose="T5")
    eos = next(x for x in (tok.eos, tok.eod, tok.sep, tok.pad) if x is not None)
    bos = next(x for x in (tok.bos, tok.cls, tok.eod, tok.pad) if x is not None)
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
        prompt, target = _texts(task, e)
        if arch == "t5":
            out.append(t5_sample(tok.encode(prompt), tok.encode(target), seq_length, dec_length, tok))
        else:
            if tok.eod is None:
                raise ConfigError(f"generative fine-tuning needs an end-of-document token; {tok.path} has none")
            out.append(gpt_sample(tok.encode(prompt), tok.encode(target), seq_length, tok.eod))
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


class GenerativeGPTSpec(_Pretrained, GPTSpec):
    pass


class GenerativeT5Spec(_Pretrained, T5Spec):
    pass


def make_spec(task, cfg: RunConfig, vocab: int, tensors: dict, source: str):
    return (GenerativeT5Spec if cfg.model.arch == "t5" else GenerativeGPTSpec)(cfg, vocab, task, tensors, source)


# ------------------------------------------------------------------------------------------- decoding


@torch.no_grad()
def t5_greedy(model, tok, sources: Sequence[Sequence[int]], max_tokens: int, enc_length: int,
              batch_size: int = 16) -> list[list[int]]:
    """Greedy decoding with an mwb T5 (whole model, one process): the encoder runs once per batch, the
    decoder re-reads its prefix each step; a row stops at eos. Returns the generated ids (without eos)."""
    bos, eos, pad = t5_specials(tok)
    device = next(model.parameters()).device
    out: list[list[int]] = []
    for s in range(0, len(sources), batch_size):
        rows = [list(x)[: enc_length - 1] + [eos] for x in sources[s:s + batch_size]]
        width = max(len(r) for r in rows)
        enc = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
        enc_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
        hidden = model.encode(enc, enc_mask)
        dec = torch.full((len(rows), 1), bos, dtype=torch.long, device=device)
        done = torch.zeros(len(rows), dtype=torch.bool, device=device)
        for _ in range(max_tokens):
            logits = model(enc, dec, enc_padding_mask=enc_mask, enc_hidden=hidden)[:, -1, : tok.vocab_size]
            nxt = torch.where(done, torch.full_like(done, pad, dtype=torch.long), logits.argmax(-1))
            done |= nxt == eos
            dec = torch.cat([dec, nxt[:, None]], dim=1)
            if bool(done.all()):
                break
        for row in dec[:, 1:].tolist():
            out.append(row[: row.index(eos)] if eos in row else row)
    return out


# -------------------------------------------------------------------------------------------- harness


class Seq2SeqRunner:
    def __init__(self, model, tokenizer, seq_length: int) -> None:
        self.model, self.tokenizer, self.seq_length = model.eval(), tokenizer, seq_length


def load_model(task, checkpoint: str, tokenizer: Optional[str] = None, device=None):
    """A GPT as a :class:`~mwb.evaluation.lm.LanguageModel`, or a T5 as a :class:`Seq2SeqRunner`."""
    cfg = full_state(checkpoint)[0]
    if cfg.model.arch not in ARCHES:
        raise ConfigError(f"{checkpoint} holds a '{cfg.model.arch}' model; task '{task.name}' generates with a "
                          f"GPT or a T5")
    if cfg.model.arch == "gpt":
        return load_language_model(checkpoint, tokenizer, device=device)
    cfg, model, stored = load_full_model(checkpoint, device=device or "cpu")
    seq = task.opts.get("seq_length") or cfg.train.seq_length
    return cfg, Seq2SeqRunner(model, load_tokenizer(tokenizer or stored), seq)


def build(task, examples: list[dict], runner) -> list[dict]:
    tok = runner.tokenizer
    return [{"prompt": tok.encode(_texts(task, e)[0])} for e in examples]


def run(task, runner, items) -> list[str]:
    max_tokens = task.opts.get("max_tokens") or 32
    batch = task.opts.get("batch_size") or 16
    prompts = [it["prompt"] for it in items]
    if isinstance(runner, Seq2SeqRunner):
        ids = t5_greedy(runner.model, runner.tokenizer, prompts, max_tokens, runner.seq_length, batch)
        return [runner.tokenizer.decode(x).strip() for x in ids]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=("\n",) if task.opts.get("first_line")
                            else ())
    return [g.text.strip() for g in generate(runner, [list(p) or [runner.eod] for p in prompts], params)]
