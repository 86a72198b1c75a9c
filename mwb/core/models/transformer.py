"""The plain transformer building blocks shared by GPT, BERT and T5.

Everything here is single-device PyTorch: ``nn.Linear`` projections, ``nn.Embedding``, norms, and attention
through ``scaled_dot_product_attention``. Tensor/sequence parallelism is applied afterwards by
:mod:`mwb.core.parallel.tensor_parallel`, which swaps the projections for sharded ones and hooks the
region boundaries; the forward code never mentions ranks. Shapes are batch-first ``[b, s, h]``; attention
heads are read from the projection's output size, so the same code runs with all heads or a TP shard.
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .dropout import Dropout
from .fused import RMSNorm, rotary_fp32
from .loss import LogitsWorkspace, blocked_cross_entropy, linear_cross_entropy
from .main_grad import embedding, linear, unhooked
from .mlp import MLP
from .moe import MoELayer


# torch >= 2.5: scaled_dot_product_attention shares kv heads itself (faster, and k/v are not kept repeated)
SDPA_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


def make_norm(cfg: ModelConfig, size: Optional[int] = None) -> nn.Module:
    size = size or cfg.hidden_size
    if cfg.normalization == "rmsnorm":
        return RMSNorm(size, eps=cfg.norm_eps)
    if cfg.normalization == "layernorm":
        return nn.LayerNorm(size, eps=cfg.norm_eps)
    raise ValueError(f"unknown normalization '{cfg.normalization}' (layernorm | rmsnorm)")


# ------------------------------------------------------------------------------------------------ rope


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables ``[s, head_dim]`` (the rotate-half layout used by Llama and Hugging Face)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    freqs = positions.float()[..., None] * inv
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x``: ``[b, heads, s, d]``; cos/sin: ``[s, d]`` or ``[b, s, d]``. fp32 takes :func:`.fused.rotary_fp32`;
    other dtypes rotate in fp32 and cast back."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    if x.dtype == torch.float32 and cos.dtype == torch.float32:
        return rotary_fp32(x, cos, sin)
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


# ------------------------------------------------------------------------------------------- attention


class KVCache:
    """Per-layer key/value tensors for incremental decoding: ``[b, kv_heads, s_so_far, d]``, grown by
    concatenation (T5's decoder and the few fixed-prefix scorers use it; GPT generation and serving use the
    preallocated, per-row cache of :mod:`.kv_cache`, which attention recognises by its ``in_place`` flag).

    A batch of left-padded sequences shares one cache (all rows have the same length, pads included; the
    caller's key-padding mask hides the pads). :meth:`keep` drops finished rows so later steps compute
    only the rows still being extended. ``cross`` holds each cross-attention layer's keys/values of the
    encoder output, computed at the first decoder step and reused after (the encoder output is fixed)."""

    def __init__(self) -> None:
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.cross: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def length(self) -> int:
        return next(iter(self.k.values())).size(2) if self.k else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.k:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` (indices into the current batch), in that order."""
        for store in (self.k, self.v):
            for layer, t in store.items():
                store[layer] = t.index_select(0, rows.to(t.device))
        for layer, (k, v) in self.cross.items():
            self.cross[layer] = (k.index_select(0, rows.to(k.device)), v.index_select(0, rows.to(v.device)))


def padding_mask(key_mask: torch.Tensor, q_len: int) -> torch.Tensor:
    """Boolean attention mask ``[b, 1, q_len, kv]`` from a key-padding mask ``[b, kv]`` (true = real token),
    for queries that are the last ``q_len`` of the ``kv`` positions; causality is added by the attention.

    Every position may also attend to itself: a pad query would otherwise have no visible key at all,
    its softmax would be NaN, and that NaN would reach real rows of the next layer through ``0 · NaN`` in
    the value product. Real queries never see a pad key, so their results are those of the unpadded row."""
    kv = key_mask.size(1)
    keys = torch.arange(kv, device=key_mask.device)
    self_ = keys[None, :] == torch.arange(kv - q_len, kv, device=key_mask.device)[:, None]
    return key_mask.bool()[:, None, None, :] | self_[None, None]


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Boolean attention mask ``[b, 1, s, s]`` of packed rows (``document_ids [b, s]``): a query sees the keys
    of its own document only, a block-diagonal mask; causality is added by the attention. Padding carries one
    id of its own, so every query sees at least itself (no empty softmax row)."""
    return (document_ids[:, :, None] == document_ids[:, None, :])[:, None]


class AttentionCore(nn.Module):
    """softmax(q·kᵀ/√d + bias)·v with dropout: the part selective recomputation recomputes."""

    def __init__(self, dropout: float, scale: Optional[float] = None) -> None:
        super().__init__()
        self.dropout = dropout
        self.scale = scale
        self.cp = None  # set by parallel.context.parallelize_context when the sequence is split over CP
        # Context manager factory for the random stream of attention-probability dropout: the default stream
        # here; the tensor-parallel plan points it at the model-parallel stream (probabilities of local heads
        # are sharded over TP, so each TP rank must draw its own mask).
        self.dropout_rng = contextlib.nullcontext

    def forward(self, q, k, v, causal: bool = False, mask: Optional[torch.Tensor] = None):
        if self.cp is not None:  # context parallel: attend over every rank's keys and values
            k, v, cp_mask = self.cp.gather_kv(k, v, causal)
            if cp_mask is not None:
                mask = cp_mask if mask is None else mask & cp_mask
                causal = False
        kw = {}
        if k.size(1) != q.size(1):  # grouped-query attention: share each kv head over its query heads
            if SDPA_GQA:  # the kernel reads each kv head for its query heads: no repeated copies kept
                kw["enable_gqa"] = True
            else:
                rep = q.size(1) // k.size(1)
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
        p = self.dropout if self.training else 0.0
        if p > 0.0:
            with self.dropout_rng():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                                      is_causal=causal and mask is None, scale=self.scale, **kw)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              scale=self.scale, **kw)


class Attention(nn.Module):
    """Multi-head / grouped-query attention, self or cross."""

    def __init__(self, cfg: ModelConfig, layer_id: int, causal: bool, cross: bool = False,
                 scale: Optional[float] = None) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.layer_id, self.causal, self.cross, self.head_dim = layer_id, causal, cross, d
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=cfg.bias)
        self.k_proj = nn.Linear(h, cfg.query_groups * d, bias=cfg.bias)
        self.v_proj = nn.Linear(h, cfg.query_groups * d, bias=cfg.bias)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=cfg.bias)
        self.core = AttentionCore(cfg.attn_dropout, scale)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, -1, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, kv_input: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None, rope: Optional[tuple] = None,
                cache: Optional[KVCache] = None) -> torch.Tensor:
        b, s, _ = x.shape
        src = x if kv_input is None else kv_input
        q = self._heads(linear(self.q_proj, x))
        if self.cross and cache is not None and self.layer_id in cache.cross:
            k, v = cache.cross[self.layer_id]
        else:
            k, v = self._heads(linear(self.k_proj, src)), self._heads(linear(self.v_proj, src))
            if self.cross and cache is not None:
                cache.cross[self.layer_id] = (k, v)
        if rope is not None:
            q_cos, q_sin, k_cos, k_sin = rope
            q, k = apply_rope(q, q_cos, q_sin), apply_rope(k, k_cos, k_sin)
        causal = self.causal
        if cache is not None and not self.cross and getattr(cache, "in_place", False):
            # preallocated cache (kv_cache.py): per-row lengths, its own mask (causality included)
            k, v, mask = cache.update(self.layer_id, k, v)
            causal = False
        elif cache is not None and not self.cross:
            past = cache.length() if self.layer_id in cache.k else 0
            k, v = cache.update(self.layer_id, k, v)
            if causal and past > 0:  # queries sit at positions past..past+s-1 of the keys
                if s > 1:  # (one query, the last position, may see every key: no causal mask needed)
                    qpos = torch.arange(past, past + s, device=x.device)[:, None]
                    allowed = torch.arange(k.size(2), device=x.device)[None, :] <= qpos
                    mask = allowed if mask is None else (mask & allowed if mask.dtype == torch.bool
                                                         else mask.masked_fill(~allowed, float("-inf")))
                causal = False
        if causal and mask is not None:  # combine an explicit mask with causality
            allowed = torch.ones(s, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - s)
            mask = mask & allowed if mask.dtype == torch.bool else mask.masked_fill(~allowed, float("-inf"))
            causal = False
        out = self.core(q, k, v, causal=causal, mask=mask)
        out = out.transpose(1, 2).reshape(b, s, -1)
        return linear(self.o_proj, out)


# ------------------------------------------------------------------------------------------------- mlp


def make_mlp(cfg: ModelConfig, layer_id: int) -> nn.Module:
    """A dense MLP, or a mixture of experts on every ``moe_layer_freq``-th layer."""
    if cfg.num_experts and layer_id % max(cfg.moe_layer_freq, 1) == 0:
        return MoELayer(cfg)
    return MLP(cfg)


# ----------------------------------------------------------------------------------------------- block


class TransformerBlock(nn.Module):
    """Pre-norm block: x + drop(attn(norm(x))) [+ drop(cross(norm(x), enc))] + drop(mlp(norm(x)))."""

    def __init__(self, cfg: ModelConfig, layer_id: int, causal: bool, cross_attention: bool = False,
                 attn_scale: Optional[float] = None) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.ln1 = make_norm(cfg)
        self.attn = Attention(cfg, layer_id, causal=causal, scale=attn_scale)
        self.drop1 = Dropout(cfg.dropout)
        if cross_attention:
            self.ln_cross = make_norm(cfg)
            self.cross_attn = Attention(cfg, layer_id, causal=False, cross=True, scale=attn_scale)
            self.drop_cross = Dropout(cfg.dropout)
        self.ln2 = make_norm(cfg)
        self.mlp = make_mlp(cfg, layer_id)
        self.drop2 = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask=None, rope=None, cache=None, enc: Optional[torch.Tensor] = None,
                cross_mask=None) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.ln1(x), mask=mask, rope=rope, cache=cache))
        if enc is not None:
            x = x + self.drop_cross(self.cross_attn(self.ln_cross(x), kv_input=enc, mask=cross_mask, cache=cache))
        return x + self.drop2(self.mlp(self.ln2(x)))


# -------------------------------------------------------------------------------------------- embedding


class Embedding(nn.Module):
    """Word (+ learned position) (+ token type) embeddings, summed."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, tokentypes: int = 0) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab_size, cfg.hidden_size)
        self.position = (nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
                         if cfg.position_embedding == "learned" else None)
        self.tokentype = nn.Embedding(tokentypes, cfg.hidden_size) if tokentypes else None

    def forward(self, tokens: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                tokentype_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = embedding(self.word, tokens)
        if self.position is not None:
            if position_ids is None:
                position_ids = torch.arange(tokens.size(1), device=tokens.device)[None]
            x = x + self.position(position_ids)
        if self.tokentype is not None:
            if tokentype_ids is None:
                tokentype_ids = torch.zeros_like(tokens)
            x = x + self.tokentype(tokentype_ids)
        return x


class TiedEmbeddingStage:
    """Output-head tying for pipeline-stage-aware models with ``embed``/``head``, ``pre_process``/
    ``post_process`` and ``cfg.tie_embeddings``: the head shares the word embedding when both live on this
    stage; otherwise a stage holding only one of them keeps a copy that the optimizer keeps equal.

    It also holds what every stage-aware model (GPT, BERT, T5) keeps: config, vocabulary sizes, whether the
    stage is first/last (:meth:`init_stage`), how many ranks share the sequence between layers (tp under
    sequence parallelism, so a stage that receives a sequence slice still knows the full length) and the
    rotary tables for given positions (:meth:`rope_for`)."""

    seq_shards = 1

    def init_stage(self, cfg: ModelConfig, vocab_size: int, padded_vocab_size: Optional[int], pre_process: bool,
                   post_process: bool) -> None:
        """The attributes every stage-aware model keeps (call after ``nn.Module.__init__``)."""
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.padded_vocab_size = padded_vocab_size or vocab_size
        self.pre_process, self.post_process = pre_process, post_process

    def parallelize_tp(self, state) -> None:
        self.seq_shards = state.tp_size if state.sp else 1

    def full_seq_len(self, hidden: torch.Tensor) -> int:
        return hidden.size(1) * self.seq_shards

    def rope_for(self, positions: torch.Tensor) -> Optional[tuple]:
        """``(q_cos, q_sin, k_cos, k_sin)`` for ``positions`` with rotary positions configured, else None."""
        if self.cfg.position_embedding != "rope":
            return None
        cos, sin = rope_tables(positions, self.cfg.head_dim, self.cfg.rope_theta)
        return cos, sin, cos, sin

    def tie_weights(self) -> None:
        if self.cfg.tie_embeddings and self.pre_process and self.post_process:
            self.head.weight = self.embed.word.weight

    @property
    def shares_embedding(self) -> bool:
        """Whether this stage holds a tied embedding copy that must stay equal to another stage's."""
        return self.cfg.tie_embeddings and (self.pre_process != self.post_process)


class CrossEntropy(nn.Module):
    """Token losses over the real vocabulary (padded vocab columns never take part), summed with a mask.

    Returns ``(loss_sum, token_count)`` so callers can normalise by the token count of the whole global
    batch; ``labels < 0`` are ignored. Token losses are computed a block of tokens at a time without an
    fp32 copy of the logits (:mod:`.loss`). Tensor parallelism swaps this for the vocab-parallel version.
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.workspace = LogitsWorkspace()  # the fused head's spare logits, reused step to step

    def token_losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return blocked_cross_entropy(logits, labels.clamp(min=0), self.vocab_size)

    def fuses(self, head: nn.Module) -> bool:
        """Whether :meth:`head_loss` may run ``head`` and the loss as one function: a plain bias-free
        ``nn.Linear`` that nothing hooks or wraps, and this very class's token losses (the vocab-parallel
        subclass, and any other, keep the two apart)."""
        return (unhooked(head, nn.Linear) and head.bias is None and unhooked(self, type(self))
                and type(self).token_losses is CrossEntropy.token_losses)

    def head_loss(self, hidden: torch.Tensor, head: nn.Module, labels, loss_mask: Optional[torch.Tensor] = None):
        """``self(head(hidden), labels, loss_mask)``. When :meth:`fuses` allows, and a gradient is wanted, the
        output layer and the cross-entropy run fused: the logits, the largest activation of a small model,
        are made once and become their own gradient (:func:`~.loss.linear_cross_entropy`)."""
        if torch.is_grad_enabled() and self.fuses(head):
            return self._masked_sum(linear_cross_entropy(hidden, head.weight, labels.clamp(min=0), self.vocab_size,
                                                         self.workspace),
                                    labels, loss_mask)
        return self(head(hidden), labels, loss_mask)

    def forward(self, logits, labels, loss_mask: Optional[torch.Tensor] = None):
        return self._masked_sum(self.token_losses(logits, labels), labels, loss_mask)

    @staticmethod
    def _masked_sum(losses: torch.Tensor, labels, loss_mask: Optional[torch.Tensor]):
        mask = labels >= 0
        if loss_mask is not None:
            mask = mask & loss_mask.bool()
        mask = mask.to(losses.dtype)
        return (losses * mask).sum(), mask.sum()


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's padding: a multiple of ``divisible_by · tp`` so every TP shard is equal and aligned."""
    m = divisible_by * tp
    return int(math.ceil(vocab_size / m) * m)
