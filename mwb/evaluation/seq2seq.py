"""Batched generation from an encoder–decoder (the mwb T5 model): summarization, fusion-in-decoder readers,
any source → target task. Beam search (``SamplingParams.num_beams`` > 1) is :mod:`.beam_search`'s, with
``num_beams`` decoder rows per source sharing its encoder output.

Each batch is encoded once (sources right-padded, the encoder's key-padding mask hiding the pads); the
decoder then runs step by step with a :class:`~mwb.core.models.transformer.KVCache` holding its
self-attention keys/values, and each cross-attention layer's keys/values of the encoder output, computed
at the first step and reused after. Every row starts from the same decoder start token, so decoder rows
never need padding. Sampling, stopping and seeding are :mod:`.generation`'s (same :class:`SamplingParams`,
same per-row random streams, finished rows leave the batch and the cache); the end token is the
tokenizer's ``eos`` (else ``eod``/``sep``/``pad``), the decoder start its ``bos`` (else ``cls``/``eod``/
``pad``): the rule mwb's T5 span-corruption data uses, so a model trained on it decodes from what it saw.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from mwb.core.data.t5 import end_and_start_ids
from mwb.core.models.transformer import KVCache
from .beam_search import PromptBeams, ban_repeats, run_beams
from .generation import (Generation, SamplingParams, _accept, _Row, _shared_seed, beam_outputs, row_generator,
                         sample_tokens, stop_check)
from .lm import check_whole_model, full_vocab_logits


class Seq2SeqModel:
    """A T5 model (possibly TP-sharded, whole model on each rank) + tokenizer, seen as generation needs it:
    fp32 decoder logits over the real vocabulary, identical on every TP rank."""
    encoder_decoder = True  # declared for the generative objective, which builds encoder inputs for it

    def __init__(self, model: nn.Module, tokenizer, state=None, device: Optional[torch.device] = None,
                 decoder_start: Optional[int] = None) -> None:
        check_whole_model(model, state)
        self.model, self.tokenizer, self.state = model.eval(), tokenizer, state
        self.device = device or next(model.parameters()).device
        self.vocab_size = int(getattr(model, "vocab_size", None) or tokenizer.vocab_size)
        self.eod, start = end_and_start_ids(tokenizer)  # the end token (``eod`` for generation)
        self.decoder_start = decoder_start if decoder_start is not None else start
        if self.decoder_start is None:
            raise ValueError("the tokenizer has no bos/cls/eod/pad token to start the decoder: pass decoder_start")
        cfg = model.cfg
        self.max_length = cfg.max_position_embeddings if cfg.position_embedding == "learned" else 1 << 30

    @property
    def tp_group(self):
        return None if self.state is None else self.state.tp_group

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def source_ids(self, source: Union[str, Sequence[int]]) -> list[int]:
        """Token ids of a source; text gets the end token appended, as the T5 data pipeline's inputs."""
        if not isinstance(source, str):
            return [int(t) for t in source]
        ids = list(self.tokenizer.encode(source))
        return ids + [self.eod] if self.eod is not None and (not ids or ids[-1] != self.eod) else ids

    @torch.no_grad()
    def logits(self, dec_tokens: torch.Tensor, enc: torch.Tensor, enc_mask: torch.Tensor,
               cache: KVCache) -> torch.Tensor:
        out = self.model.decoder_logits(dec_tokens.to(self.device), enc, enc_mask, cache=cache)[:, -1]
        return full_vocab_logits(out, self.tp_group, self.vocab_size)


@torch.no_grad()
def _decode_batch(s2s: Seq2SeqModel, rows: list[_Row], params: SamplingParams) -> None:
    width = max(len(r.context) for r in rows)
    enc_tokens = torch.tensor([r.context + [0] * (width - len(r.context)) for r in rows], dtype=torch.long)
    enc_mask = (torch.arange(width)[None, :] < torch.tensor([len(r.context) for r in rows])[:, None]).long()
    enc_tokens, enc_mask = enc_tokens.to(s2s.device), enc_mask.to(s2s.device)
    enc = s2s.model.encode(enc_tokens, enc_mask)
    cache = KVCache()
    start = torch.full((len(rows), 1), s2s.decoder_start, dtype=torch.long)
    last = s2s.logits(start, enc, enc_mask, cache)
    active = list(rows)
    stops = [s for s in params.stop if s]
    for step in range(params.max_tokens):
        history = [[s2s.decoder_start] + r.out.tokens for r in active]  # what the decoder has read
        picked = sample_tokens(ban_repeats(last, history, params.no_repeat_ngram_size), params,
                               [r.generator for r in active])
        logp = F.log_softmax(last, dim=-1)
        for k, r in enumerate(active):
            # the decoder sequence is the start token + the completion (``context`` is the source)
            _accept(r, picked[k], logp[k], s2s, params, stops, step + 1 == params.max_tokens, prefix=1)
        keep = [k for k, r in enumerate(active) if not r.done]
        if not keep:
            break
        if len(keep) < len(active):  # finished rows leave the batch, the encoder output and the cache
            idx = torch.tensor(keep, device=s2s.device)
            enc, enc_mask = enc.index_select(0, idx), enc_mask.index_select(0, idx)
            cache.keep(idx)
            active = [active[k] for k in keep]
        new = torch.tensor([[r.out.tokens[-1]] for r in active], dtype=torch.long)
        last = s2s.logits(new, enc, enc_mask, cache)


@torch.no_grad()
def _beam_batch(s2s: Seq2SeqModel, outs: list[Generation], sources: list[list[int]],
                params: SamplingParams) -> list[list[Generation]]:
    """Beam search for one batch of sources: encoded once, ``num_beams`` decoder rows per source (each
    copying its source's encoder output and cross-attention cache)."""
    width = max(len(s) for s in sources)
    enc_tokens = torch.tensor([s + [0] * (width - len(s)) for s in sources], dtype=torch.long).to(s2s.device)
    enc_mask = (torch.arange(width)[None, :] < torch.tensor([len(s) for s in sources])[:, None]).long()
    enc_mask = enc_mask.to(s2s.device)
    state = {"enc": s2s.model.encode(enc_tokens, enc_mask), "mask": enc_mask, "cache": KVCache()}
    start = torch.full((len(sources), 1), s2s.decoder_start, dtype=torch.long)
    logits = s2s.logits(start, state["enc"], enc_mask, state["cache"])
    stops = [s for s in params.stop if s]
    beams = [PromptBeams(params.num_beams, min(params.max_tokens, s2s.max_length),
                         params.length_penalty, params.no_repeat_ngram_size,
                         s2s.eod if params.stop_at_eod else None, stop_check(s2s, stops),
                         prefix=[s2s.decoder_start], top_n=params.top_logprobs) for _ in sources]

    def advance(rows: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        rows = rows.to(s2s.device)
        state["enc"], state["mask"] = state["enc"].index_select(0, rows), state["mask"].index_select(0, rows)
        state["cache"].keep(rows)
        return s2s.logits(new, state["enc"], state["mask"], state["cache"])

    run_beams(beams, logits, advance)
    return [beam_outputs(s2s, out, b, params.n, stops) for out, b in zip(outs, beams)]


def generate_seq2seq(model: Union[nn.Module, Seq2SeqModel], tokenizer,
                     sources: Sequence[Union[str, Sequence[int]]], params: Optional[SamplingParams] = None,
                     batch_size: int = 16, state=None) -> list[Generation]:
    """``params.n`` targets for each source (text or token ids), ``batch_size`` rows at a time; returned
    source-major like :func:`~mwb.evaluation.generation.generate`, with the same per-row random streams
    (so batch 16 and batch 1 agree). ``Generation.prompt``/``prompt_tokens`` hold the source."""
    params = params or SamplingParams()
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    s2s = model if isinstance(model, Seq2SeqModel) else Seq2SeqModel(model, tokenizer, state)
    if params.beam:
        return beam_generate_seq2seq(s2s, sources, params, batch_size)
    seed = None if params.greedy else _shared_seed(s2s, params.seed)
    rows: list[_Row] = []
    for source in sources:
        out, ids = _source_row(s2s, source)
        for j in range(params.n):
            gen = None if seed is None else row_generator(seed, len(rows), s2s.device)
            rows.append(_Row(out if j == 0 else Generation(prompt=out.prompt, prompt_tokens=list(ids)), ids, gen))
    if params.max_tokens == 0:
        return [r.out for r in rows]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].context))
    for start in range(0, len(order), batch_size):
        _decode_batch(s2s, [rows[i] for i in order[start:start + batch_size]], params)
    return [r.out for r in rows]


def _source_row(s2s: Seq2SeqModel, source: Union[str, Sequence[int]]) -> tuple[Generation, list[int]]:
    ids = s2s.source_ids(source)
    if not ids:
        raise ValueError("an empty source: give the encoder at least one token")
    return Generation(prompt=source if isinstance(source, str) else s2s.decode(ids), prompt_tokens=list(ids)), ids


def beam_generate_seq2seq(s2s: Seq2SeqModel, sources: Sequence[Union[str, Sequence[int]]], params: SamplingParams,
                          batch_size: int = 16) -> list[Generation]:
    """Beam search (what :func:`generate_seq2seq` runs when ``num_beams`` > 1; here ``num_beams = 1`` too) over
    ``batch_size`` sources at a time; ``params.n`` per source, source-major."""
    first = [_source_row(s2s, s) for s in sources]
    results: list[list[Generation]] = [[] for _ in first]
    order = sorted(range(len(first)), key=lambda i: -len(first[i][1]))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        outs = _beam_batch(s2s, [first[i][0] for i in chunk], [first[i][1] for i in chunk], params)
        for i, gens in zip(chunk, outs):
            results[i] = gens
    return [g for gens in results for g in gens]
