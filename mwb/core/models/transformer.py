"""The plain transformer building blocks shared by GPT, BERT and T5.

Everything here is single-device PyTorch: ``nn.Linear`` projections, ``nn.Embedding``, norms, and attention
through ``scaled_dot_product_attention``. Tensor/sequence parallelism is applied afterwards by
:mod:`mwb.core.parallel.tensor_parallel`, which swaps the projections for sharded ones and hooks the
region boundaries; the forward code never mentions ranks. Shapes are batch-first ``[b, s, h]``; attention
heads are read from the projection's output size, so the same code runs with all heads or a TP shard.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig


def make_norm(cfg: ModelConfig, size: Optional[int] = None) -> nn.Module:
    size = size or cfg.hidden_size
    if cfg.normalization == "rmsnorm":
        return nn.RMSNorm(size, eps=cfg.norm_eps)
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
    """``x``: ``[b, heads, s, d]``; cos/sin: ``[s, d]`` or ``[b, s, d]``."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


# ------------------------------------------------------------------------------------------- attention


class KVCache:
    """Per-layer key/value tensors for incremental decoding: ``[b, kv_heads, s_so_far, d]``."""

    def __init__(self) -> None:
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}

    def length(self) -> int:
        return next(iter(self.k.values())).size(2) if self.k else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.k:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v


class AttentionCore(nn.Module):
    """softmax(q·kᵀ/√d + bias)·v with dropout: the part selective recomputation recomputes."""

    def __init__(self, dropout: float, scale: Optional[float] = None) -> None:
        super().__init__()
        self.dropout = dropout
        self.scale = scale
        self.cp = None  # set by parallel.context.parallelize_context when the sequence is split over CP

    def forward(self, q, k, v, causal: bool = False, mask: Optional[torch.Tensor] = None):
        if self.cp is not None:  # context parallel: attend over every rank's keys and values
            k, v, cp_mask = self.cp.gather_kv(k, v, causal)
            if cp_mask is not None:
                mask = cp_mask if mask is None else mask & cp_mask
                causal = False
        if k.size(1) != q.size(1):  # grouped-query attention: share each kv head over its query heads
            rep = q.size(1) // k.size(1)
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        p = self.dropout if self.training else 0.0
        if p > 0.0:
            from ..parallel.random import get_rng_tracker
            with get_rng_tracker().fork():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                                      is_causal=causal and mask is None, scale=self.scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              scale=self.scale)


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
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(src)), self._heads(self.v_proj(src))
        if rope is not None:
            q_cos, q_sin, k_cos, k_sin = rope
            q, k = apply_rope(q, q_cos, q_sin), apply_rope(k, k_cos, k_sin)
        causal = self.causal
        if cache is not None and not self.cross:
            past = cache.length() if self.layer_id in cache.k else 0
            k, v = cache.update(self.layer_id, k, v)
            if causal and past > 0:  # queries sit at positions past..past+s-1 of the keys
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
        return self.o_proj(out)


# ------------------------------------------------------------------------------------------------- mlp


ACTIVATIONS = ("gelu", "gelu_tanh", "swiglu", "relu", "geglu_tanh")
GATED = ("swiglu", "geglu_tanh")  # act(gate) · up


class MLP(nn.Module):
    """GeLU/ReLU MLP (up → act → down) or a gated one: SwiGLU (silu(gate) · up → down) and ``geglu_tanh``
    (tanh-gelu(gate) · up, T5 v1.1's "gated-gelu"). ``gelu_tanh`` is GPT-2's tanh approximation (Hugging
    Face ``gelu_new``), needed for converted GPT-2 (and T5 v1.1) weights to give the same logits."""

    def __init__(self, cfg: ModelConfig, ffn: Optional[int] = None) -> None:
        super().__init__()
        h, f = cfg.hidden_size, ffn or cfg.ffn_size
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation '{cfg.activation}' ({' | '.join(ACTIVATIONS)})")
        self.gated = cfg.activation in GATED
        self.swiglu = cfg.activation == "swiglu"
        self.relu = cfg.activation == "relu"
        self.gelu_approximate = "tanh" if cfg.activation in ("gelu_tanh", "geglu_tanh") else "none"
        self.up_proj = nn.Linear(h, f, bias=cfg.bias)
        if self.gated:
            self.gate_proj = nn.Linear(h, f, bias=cfg.bias)
        self.down_proj = nn.Linear(f, h, bias=cfg.bias)

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return F.silu(x)
        if self.relu:
            return F.relu(x)
        return F.gelu(x, approximate=self.gelu_approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down_proj(self._act(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(self._act(self.up_proj(x)))


def make_mlp(cfg: ModelConfig, layer_id: int) -> nn.Module:
    """A dense MLP, or a mixture of experts on every ``moe_layer_freq``-th layer."""
    if cfg.num_experts and layer_id % max(cfg.moe_layer_freq, 1) == 0:
        from .moe import MoELayer
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
        self.drop1 = nn.Dropout(cfg.dropout)
        if cross_attention:
            self.ln_cross = make_norm(cfg)
            self.cross_attn = Attention(cfg, layer_id, causal=False, cross=True, scale=attn_scale)
            self.drop_cross = nn.Dropout(cfg.dropout)
        self.ln2 = make_norm(cfg)
        self.mlp = make_mlp(cfg, layer_id)
        self.drop2 = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask=None, rope=None, cache=None, enc: Optional[torch.Tensor] = None,
                cross_mask=None) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.ln1(x), mask=mask, rope=rope, cache=cache))
        if enc is not None:
            x = x + self.drop_cross(self.cross_attn(self.ln_cross(x), kv_input=enc, mask=cross_mask))
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
        x = self.word(tokens)
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
    batch; ``labels < 0`` are ignored. Tensor parallelism swaps this for the vocab-parallel version.
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def token_losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits[..., : self.vocab_size].float()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1).clamp(min=0),
                               reduction="none").view_as(labels)

    def forward(self, logits, labels, loss_mask: Optional[torch.Tensor] = None):
        losses = self.token_losses(logits, labels)
        mask = labels >= 0
        if loss_mask is not None:
            mask = mask & loss_mask.bool()
        mask = mask.to(losses.dtype)
        return (losses * mask).sum(), mask.sum()


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's padding: a multiple of ``divisible_by · tp`` so every TP shard is equal and aligned."""
    m = divisible_by * tp
    return int(math.ceil(vocab_size / m) * m)
