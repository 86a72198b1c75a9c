"""A causal language model as the harness sees it: token ids in, full-vocabulary log-probabilities out.

Why a wrapper: evaluation, generation and the server all need the same few things from a model — logits
over the *real* vocabulary (not the padded one), gathered over tensor parallelism so every TP rank sees
all of them, in eval mode without autograd, plus the tokenizer and the longest context the model accepts.
Keeping that in one class means no task ever touches ``padded_vocab_size`` or a process group.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mwb.core.models.packed_linear import pack_linears
from mwb.core.models.transformer import KVCache
from mwb.core.parallel.collectives import gather_from_tp, group_size

from .windows import rolling_windows  # one windowing rule for the server and WikiText


def check_whole_model(model: nn.Module, state) -> None:
    """Evaluation and generation need every layer, the embedding and the head on each rank, unsplit."""
    if not (getattr(model, "pre_process", True) and getattr(model, "post_process", True)):
        raise ValueError("evaluation needs the whole model on each rank (no pipeline stages)")
    if state is not None and getattr(state, "sp", False):
        raise ValueError("evaluation and generation run without sequence parallelism (build without --sp)")


def full_vocab_logits(out: torch.Tensor, tp_group, vocab_size: int) -> torch.Tensor:
    """fp32 logits over the real vocabulary from the head's output (vocab-sharded under TP: gathered, so
    every TP rank holds the same tensor; the padded vocab columns dropped)."""
    if group_size(tp_group) > 1:
        out = gather_from_tp(out, tp_group)
    return out[..., :vocab_size].float()


class LanguageModel:
    """``model`` (a :class:`~mwb.core.models.gpt.GPTModel`, possibly TP-sharded) + ``tokenizer``.

    ``state`` is the rank's :class:`~mwb.core.parallel.ParallelState` (``None`` = one process). Pipeline
    parallelism is not supported here: the model must hold the embedding and the head.
    ``pack_weights``: run the model's linears on CPU through oneDNN with packed weights
    (:mod:`mwb.core.models.packed_linear`; faster generation, one more copy of the weights in memory); ``None``
    packs when ``device`` is the CPU. Only for a model that is no longer trained: the loaders of
    ``mwb eval/generate/serve`` pass ``None`` (or the user's choice), everything else keeps the default, off.
    """
    encoder_decoder = False  # a decoder-only model: prompts are its context (Seq2SeqModel's is True)

    def __init__(self, model: nn.Module, tokenizer, state=None, device: Optional[torch.device] = None,
                 max_length: Optional[int] = None, pack_weights: Optional[bool] = False) -> None:
        check_whole_model(model, state)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.state = state
        self.device = device or next(model.parameters()).device
        self.vocab_size = int(getattr(model, "vocab_size", None) or tokenizer.vocab_size)
        cfg = getattr(model, "cfg", None)
        learned = cfg is not None and cfg.position_embedding == "learned"
        self.max_length = max_length or (cfg.max_position_embeddings if learned else 1 << 30)
        if pack_weights is None:
            pack_weights = torch.device(self.device).type == "cpu"
        self.packed_linears = pack_linears(model) if pack_weights else 0

    @property
    def tp_group(self):
        return None if self.state is None else self.state.tp_group

    @property
    def tp_rank(self) -> int:
        return 0 if self.state is None else self.state.tp_rank

    @property
    def eod(self) -> Optional[int]:
        return getattr(self.tokenizer, "eod", None)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor, cache: Optional[KVCache] = None,
               position_ids: Optional[torch.Tensor] = None,
               attention_mask: Optional[torch.Tensor] = None, last_only: bool = False) -> torch.Tensor:
        """fp32 logits ``[b, s, vocab_size]`` for ``tokens [b, s]``; identical on every TP rank.
        ``cache``: a concatenating :class:`KVCache`, or a :class:`~mwb.core.models.kv_cache.PreallocatedKVCache`
        (then pass the ``position_ids`` its ``begin`` returned; it supplies the attention mask itself).
        ``attention_mask [b, cached + s]`` (true = real token) is for left-padded batches; ``last_only``
        gives the last position's logits only, ``[b, 1, vocab_size]``."""
        kw = {} if attention_mask is None else {"attention_mask": attention_mask.to(self.device)}
        if last_only:
            kw["logits_to_keep"] = 1
        if position_ids is not None:
            position_ids = position_ids.to(self.device)
        out = self.model(tokens.to(self.device), position_ids=position_ids, cache=cache, **kw)
        return full_vocab_logits(out, self.tp_group, self.vocab_size)

    def log_probs(self, tokens: torch.Tensor, cache: Optional[KVCache] = None) -> torch.Tensor:
        """Log-softmax over the real vocabulary, ``[b, s, vocab_size]``."""
        return F.log_softmax(self.logits(tokens, cache=cache), dim=-1)

    @torch.no_grad()
    def token_logprobs(self, ids: Sequence[int]) -> list[Optional[float]]:
        """log p(ids[i] | ids[:i]) for each position; the first token has no context, so ``None``.

        Sequences longer than the model's context are scored in windows that each keep the previous
        ``max_length // 2`` tokens as context (each token scored once)."""
        ids = list(ids)
        out: list[Optional[float]] = [None]
        if len(ids) < 2:
            return out[: len(ids)]
        for start, inputs, first in rolling_windows(ids, self.max_length, max(1, self.max_length // 2)):
            x = torch.tensor([inputs[:-1]], dtype=torch.long)
            lp = self.log_probs(x)[0]
            tgt = torch.tensor(inputs[1:], dtype=torch.long, device=lp.device)
            got = lp.gather(-1, tgt[:, None])[:, 0]
            out.extend(float(v) for v in got[first:].tolist())
        return out
