"""Exact parameter and FLOP counts of an mwb model, from its config alone (no torch, no tensors).

The counts follow the modules mwb builds (``mwb.core.models``): separate q/k/v/o projections with grouped
query attention, a GeLU/ReLU (2·h·f) or SwiGLU (3·h·f) MLP, biases when ``bias``, two norms per block
(LayerNorm weight + bias, RMSNorm weight only), a final norm, learned position embeddings, an untied head
when embeddings are not tied, and mixture-of-experts MLPs on every ``moe_layer_freq``-th layer (experts plus
an h·E router, of which a token uses ``moe_top_k`` experts). Per-rank counts split each tensor the way
Megatron's tensor parallelism does, so the memory model can charge each rank for exactly what it holds.
BERT and T5 extras are counted the Megatron way (LM-head transform, pooler, decoder cross-attention); the
Table 1 validation covers GPT.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..config import ModelConfig

DEFAULT_VOCAB = 50257  # GPT-2's, used when the config leaves vocab_size to the tokenizer


@dataclass(frozen=True)
class LayerCount:
    """Parameters of one transformer block, split by how tensor/expert parallelism divides them."""

    sharded: int  # divided over TP (column/row-parallel weights, column-parallel biases)
    replicated: int  # held whole by every TP rank (norms, row-parallel biases, the MoE router)
    expert: int  # MoE expert weights, divided over EP and TP
    active: int  # parameters a token's forward pass multiplies by (top-k experts only)
    attention_blocks: int  # self (+ cross) attention cores, for the s² FLOP term
    moe: bool = False

    @property
    def total(self) -> int:
        return self.sharded + self.replicated + self.expert


@dataclass(frozen=True)
class ModelShape:
    """The numbers the planner needs, with defaults resolved (vocab padding, ffn size, head dim)."""

    cfg: ModelConfig
    seq_length: int
    vocab_size: int  # unpadded
    vocab_assumed: bool = False  # True when the config had none and DEFAULT_VOCAB is used

    @classmethod
    def from_config(cls, cfg: ModelConfig, seq_length: int) -> "ModelShape":
        vocab = cfg.vocab_size or DEFAULT_VOCAB
        return cls(cfg, seq_length, vocab, vocab_assumed=cfg.vocab_size is None)

    # ---- shape ----
    @property
    def h(self) -> int:
        return self.cfg.hidden_size

    @property
    def heads(self) -> int:
        return self.cfg.num_attention_heads

    @property
    def num_layers(self) -> int:
        """Blocks in the pipeline: encoder + decoder for T5."""
        extra = (self.cfg.num_decoder_layers or self.cfg.num_layers) if self.cfg.arch == "t5" else 0
        return self.cfg.num_layers + extra

    def padded_vocab(self, tp: int = 1) -> int:
        """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by · tp``."""
        m = max(self.cfg.make_vocab_size_divisible_by, 1) * tp
        return int(math.ceil(self.vocab_size / m) * m)

    @property
    def norm_params(self) -> int:
        return 2 * self.h if self.cfg.normalization == "layernorm" else self.h

    # ---- per block ----
    def _attention(self) -> tuple[int, int]:
        c, h, d = self.cfg, self.h, self.cfg.head_dim
        qkv = (c.num_attention_heads + 2 * c.query_groups) * d
        proj = c.num_attention_heads * d
        sharded = h * qkv + proj * h + (qkv if c.bias else 0)
        return sharded, (h if c.bias else 0)

    def _mlp(self, f: int) -> tuple[int, int]:
        c, h = self.cfg, self.h
        ups = 2 if c.activation == "swiglu" else 1
        sharded = ups * h * f + f * h + (ups * f if c.bias else 0)
        return sharded, (h if c.bias else 0)

    def layer(self, index: int) -> LayerCount:
        """Block ``index`` in pipeline order (T5: encoder blocks, then decoder blocks with cross-attention)."""
        c = self.cfg
        cross = c.arch == "t5" and index >= c.num_layers
        layer_id = index - c.num_layers if cross else index
        a_sh, a_rep = self._attention()
        blocks = 2 if cross else 1
        sharded, replicated = a_sh * blocks, a_rep * blocks + (2 + cross) * self.norm_params
        moe = bool(c.num_experts) and layer_id % max(c.moe_layer_freq, 1) == 0
        if not moe:
            m_sh, m_rep = self._mlp(c.ffn_size)
            return LayerCount(sharded + m_sh, replicated + m_rep, 0, sharded + m_sh + replicated + m_rep, blocks)
        e_sh, e_rep = self._mlp(c.moe_ffn_hidden_size or c.ffn_size)
        one_expert = e_sh + e_rep
        router = self.h * c.num_experts
        if c.moe_shared_expert_ffn_hidden_size:
            s_sh, s_rep = self._mlp(c.moe_shared_expert_ffn_hidden_size)
            sharded, replicated = sharded + s_sh, replicated + s_rep
        replicated += router
        active = sharded + replicated + min(c.moe_top_k, c.num_experts) * one_expert
        return LayerCount(sharded, replicated, c.num_experts * one_expert, active, blocks, moe=True)

    # ---- outside the blocks ----
    def embedding_params(self, tp: int = 1) -> tuple[int, int]:
        """(sharded word embedding, replicated position/token-type/relative-bias tables) on the first stage."""
        c = self.cfg
        rep = c.max_position_embeddings * self.h if c.position_embedding == "learned" else 0
        if c.arch == "bert":
            rep += c.num_tokentypes * self.h
        if c.position_embedding == "relative":
            rep += c.relative_attention_num_buckets * c.num_attention_heads * (2 if c.arch == "t5" else 1)
        return self.padded_vocab(tp) * self.h, rep

    def head_params(self, tp: int = 1, pp: int = 1) -> tuple[int, int]:
        """(sharded, replicated) parameters on the last stage after the blocks: final norm(s), output layer.

        A tied output layer costs nothing when the first stage is also the last; otherwise the last stage
        keeps a trained copy of the word embeddings (Megatron and mwb both do), which this counts.
        """
        c, h = self.cfg, self.h
        V = self.padded_vocab(tp)
        replicated = self.norm_params * (2 if c.arch == "t5" else 1)
        sharded = V * h if (not c.tie_embeddings or pp > 1) else 0
        if c.arch == "bert":  # LM-head transform (dense + norm), output bias, pooler and binary head
            replicated += h * h + h + self.norm_params
            sharded += V
            if c.bert_binary_head:
                replicated += h * h + h + 2 * h + 2
        return sharded, replicated

    def layers(self) -> list[LayerCount]:
        return [self.layer(i) for i in range(self.num_layers)]


@dataclass(frozen=True)
class ParamCount:
    total: int
    embedding: int  # word + position (+ token type / relative bias)
    blocks: int
    head: int  # final norm(s) and any untied output layer
    active: int  # per token: dense parameters plus top-k experts (equals total without MoE)
    expert: int

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding


def count_parameters(shape: ModelShape) -> ParamCount:
    """The exact parameter count of the whole model (vocabulary padded as at tp = 1)."""
    e_sh, e_rep = shape.embedding_params(1)
    h_sh, h_rep = shape.head_params(1, 1)
    layers = shape.layers()
    blocks = sum(layer.total for layer in layers)
    expert = sum(layer.expert for layer in layers)
    active_blocks = sum(layer.active for layer in layers)
    emb, head = e_sh + e_rep, h_sh + h_rep
    return ParamCount(emb + blocks + head, emb, blocks, head, emb + active_blocks + head, expert)


def stage_layers(num_layers: int, pp: int, vpp: int, rank: int) -> list[int]:
    """Block indices pipeline rank ``rank`` holds: chunks rank, rank + p, … of p·v equal chunks."""
    per = num_layers // (pp * vpp)
    out: list[int] = []
    for k in range(vpp):
        chunk = rank + k * pp
        out.extend(range(chunk * per, (chunk + 1) * per))
    return out


def rank_parameters(shape: ModelShape, tp: int, pp: int, vpp: int = 1, ep: int = 1,
                    rank: int = 0, layers: Optional[list[LayerCount]] = None) -> tuple[float, float]:
    """(dense, expert) parameters one tensor-parallel rank of pipeline rank ``rank`` holds.

    Dense parameters are replicated over data parallelism; expert parameters over dp/ep. Embedding on the
    first stage, final norm and output layer (or the tied copy) on the last.
    """
    layers = layers if layers is not None else shape.layers()
    dense = expert = 0.0
    for i in stage_layers(len(layers), pp, vpp, rank):
        layer = layers[i]
        dense += layer.sharded / tp + layer.replicated
        expert += layer.expert / (tp * ep)
    if rank == 0:
        sh, rep = shape.embedding_params(tp)
        dense += sh / tp + rep
    if rank == pp - 1:
        sh, rep = shape.head_params(tp, pp)
        dense += sh / tp + rep
    return dense, expert


# ------------------------------------------------------------------------------------------------- flops


def flops_per_iteration(shape: ModelShape, global_batch: int, recompute: str = "full") -> float:
    """Matmul FLOPs of one training iteration (2 per multiply-add), any architecture mwb builds.

    Per token, a block's forward costs 2·(parameters it multiplies by) + 4·s·a·d per attention core (Q·Kᵀ and
    scores·V over the full s×s, as the paper counts them; causal masking is not subtracted) and the logit
    layer 2·h·V. Backward is twice the forward. Full recompute repeats every block's forward; selective
    recompute repeats only the attention cores. For a GPT shape this is exactly the paper's 96·B·s·l·h²·(…)
    with full recompute and 72·B·s·l·h²·(…) without.
    """
    s = shape.seq_length
    attn_core = 4 * s * shape.heads * shape.cfg.head_dim
    fwd_blocks = sum(2 * layer.active - 2 * _non_matmul(shape, layer) + layer.attention_blocks * attn_core
                     for layer in shape.layers())
    cores = sum(layer.attention_blocks for layer in shape.layers()) * attn_core
    logits = 2 * shape.h * shape.padded_vocab(1) + (2 * shape.h * shape.h if shape.cfg.arch == "bert" else 0)
    per_token = 3 * (fwd_blocks + logits)
    if recompute == "full":
        per_token += fwd_blocks
    elif recompute == "selective":
        per_token += cores
    return float(per_token) * global_batch * s


def _non_matmul(shape: ModelShape, layer: LayerCount) -> int:
    """Parameters that are not matmul weights (norms, biases), excluded from the FLOP count."""
    c, h = shape.cfg, shape.h
    norms = (2 + (layer.attention_blocks - 1)) * shape.norm_params
    if not c.bias:
        return norms
    qkv = (c.num_attention_heads + 2 * c.query_groups) * c.head_dim
    attn_bias = (qkv + h) * layer.attention_blocks
    ups = 2 if c.activation == "swiglu" else 1
    if layer.moe:
        f = c.moe_ffn_hidden_size or c.ffn_size
        mlp_bias = min(c.moe_top_k, c.num_experts) * (ups * f + h)
        if c.moe_shared_expert_ffn_hidden_size:
            mlp_bias += ups * c.moe_shared_expert_ffn_hidden_size + h
    else:
        mlp_bias = ups * c.ffn_size + h
    return norms + attn_bias + mlp_bias
