"""T5: an encoder–decoder with a shared (tied) embedding and a span-corruption LM loss on the decoder.

Positions. With ``position_embedding: relative`` (the t5 presets) the model is Raffel et al.'s T5 as
Hugging Face implements it: no position embeddings; a learned bias per (relative-position bucket, head) is
added to the attention scores, one table for the encoder (bidirectional buckets) and one for the decoder
self-attention (causal buckets), each owned by its :class:`T5Stack`, computed once per forward and
shared by every layer of that stack (T5 stores it in layer 0 only); cross-attention has no position
bias; attention scores are *not* scaled by 1/√d (T5 folds that factor into its initialisation). That
makes Hugging Face T5 checkpoints convertible (``tests/core/models/test_t5_model.py`` checks the logits).
With ``position_embedding: learned`` it is Megatron's T5 instead: learned absolute positions shared by
encoder and decoder inputs, standard 1/√d scaled attention, no bias tables.

Initialisation is mwb's layout-independent Megatron scheme (normal(0, init_std), scaled residual outputs)
for both variants, not T5's per-projection fan-in scales: at init_std 0.02 the unscaled scores start small,
which trains fine; converted checkpoints bring their own weights anyway.

Other T5 details kept: pre-norm blocks (RMSNorm and no biases in the t5 presets), a final norm and dropout
after each stack, and, with tied embeddings, the decoder output scaled by hidden_size^-0.5 before the tied
vocab projection. Padding masks are key masks (see :mod:`.bert`). Tensor parallelism: the generic pass
shards projections, embedding, head and loss; each bias table is sharded over heads by its own
``parallelize_tp``. Pipeline parallelism is not supported (a :class:`LayoutError` says so).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..parallel.dims import LayoutError
from .build import register_arch
from .transformer import CrossEntropy, Embedding, TransformerBlock, make_norm


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool = True,
                             num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """T5's bucket of ``key_pos - query_pos``.

    Bidirectional: half the buckets for keys after the query, half for keys at or before it. Causal: only
    keys at or before the query get distinct buckets (later ones fall into bucket 0 with distance 0).
    Within a direction, the first half of the buckets are exact distances 0..n/2-1; the rest cover
    distances up to ``max_distance`` on a log scale, and farther distances share the last bucket.
    """
    rel = relative_position.long()
    offset = torch.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        offset = (rel > 0).long() * n
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)
    exact = n // 2
    # log-spaced buckets for distances ≥ exact (clamp avoids log(0) on entries the `where` discards)
    scaled = torch.log(dist.clamp(min=1).float() / exact) / math.log(max_distance / exact) * (n - exact)
    large = (exact + scaled.long()).clamp(max=n - 1)
    return offset + torch.where(dist < exact, dist, large)


class RelativePositionBias(nn.Module):
    """A learned ``[num_buckets, heads]`` table → additive attention bias ``[1, heads, q, k]``."""

    def __init__(self, cfg: ModelConfig, bidirectional: bool) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = cfg.relative_attention_num_buckets
        self.max_distance = cfg.relative_attention_max_distance
        self.weight = nn.Parameter(torch.empty(self.num_buckets, cfg.num_attention_heads))

    def forward(self, q_len: int, k_len: int, device) -> torch.Tensor:
        rel = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
        buckets = relative_position_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        return F.embedding(buckets, self.weight).permute(2, 0, 1)[None]

    def parallelize_tp(self, state) -> None:
        """Keep the columns of this rank's heads (column-parallel q/k/v give rank r a contiguous block)."""
        from ..parallel.collectives import group_size
        from ..parallel.tensor_parallel import _mark
        tp = group_size(state.tp_group)
        full = tuple(self.weight.shape)
        if full[1] % tp:
            raise LayoutError(f"T5 relative bias: {full[1]} heads are not divisible by tp {tp}")
        w = nn.Parameter(torch.empty(full[0], full[1] // tp, device=self.weight.device, dtype=self.weight.dtype))
        _mark(w, 1, full, group=state.tp_group)
        self.weight = w


def _additive(bias: Optional[torch.Tensor], keep: Optional[torch.Tensor], dtype) -> Optional[torch.Tensor]:
    """Combine a float bias and a bool key mask (True = attend) into one SDPA mask. Masked keys get the
    dtype's most negative finite value, not -inf, so a fully padded row stays finite."""
    if bias is None:
        return keep
    bias = bias.to(dtype)
    return bias if keep is None else bias.masked_fill(~keep, torch.finfo(dtype).min)


class T5Stack(nn.Module):
    """One side of the model: its layers (``layers``, the name recomputation looks for), the relative bias
    table shared by those layers, and the final norm and dropout."""

    def __init__(self, cfg: ModelConfig, first_id: int, n: int, decoder: bool, relative: bool) -> None:
        super().__init__()
        scale = 1.0 if relative else None
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg, first_id + i, causal=decoder,
                                                              cross_attention=decoder, attn_scale=scale)
                                     for i in range(n)})
        self.relative_bias = RelativePositionBias(cfg, bidirectional=not decoder) if relative else None
        self.norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, seq_len: int, padding_mask: Optional[torch.Tensor] = None,
                enc: Optional[torch.Tensor] = None, enc_padding_mask: Optional[torch.Tensor] = None):
        """``seq_len`` is the full length (``x`` holds a sequence slice under SP)."""
        keep = None if padding_mask is None else padding_mask.bool()[:, None, None, :]
        bias = None if self.relative_bias is None else self.relative_bias(seq_len, seq_len, x.device)
        mask = _additive(bias, keep, x.dtype)
        cross = None if enc_padding_mask is None else enc_padding_mask.bool()[:, None, None, :]
        for layer in self.layers.values():
            x = layer(x, mask=mask) if enc is None else layer(x, mask=mask, enc=enc, cross_mask=cross)
        return self.dropout(self.norm(x))

    def parallelize_tp(self, state) -> None:
        """Under SP the final norm's output is a sequence slice: its dropout draws per-rank masks."""
        if state.sp:
            from ..parallel.random import ShardedDropout
            self.dropout = ShardedDropout(self.dropout.p)


class T5Model(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, padded_vocab_size: Optional[int] = None,
                 layer_ids: Optional[Sequence[int]] = None, pre_process: bool = True,
                 post_process: bool = True) -> None:
        super().__init__()
        if not (pre_process and post_process) or (layer_ids is not None and
                                                   list(layer_ids) != list(range(cfg.num_layers))):
            raise LayoutError("T5 does not support pipeline parallelism yet: use --pp 1")
        if cfg.position_embedding not in ("relative", "learned"):
            raise ValueError(f"T5 positions must be 'relative' (T5) or 'learned' (Megatron T5), got "
                             f"'{cfg.position_embedding}'")
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.padded_vocab_size = padded_vocab_size or vocab_size
        self.pre_process = self.post_process = True
        relative = cfg.position_embedding == "relative"
        n_enc, n_dec = cfg.num_layers, cfg.num_decoder_layers or cfg.num_layers
        self.embed = Embedding(cfg, self.padded_vocab_size)  # learned positions only when configured
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.encoder = T5Stack(cfg, 0, n_enc, decoder=False, relative=relative)
        # decoder layer ids continue after the encoder's so every Attention.layer_id is unique
        self.decoder = T5Stack(cfg, n_enc, n_dec, decoder=True, relative=relative)
        self.head = nn.Linear(cfg.hidden_size, self.padded_vocab_size, bias=False)
        self.loss_fn = CrossEntropy(vocab_size)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.cfg.tie_embeddings:
            self.head.weight = self.embed.word.weight

    @property
    def shares_embedding(self) -> bool:
        return False

    def encode(self, enc_tokens: torch.Tensor, enc_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Encoder output ``[b, s_enc, h]`` (a sequence slice under SP)."""
        x = self.embed_dropout(self.embed(enc_tokens))
        return self.encoder(x, enc_tokens.size(1), enc_padding_mask)

    def decode(self, dec_tokens: torch.Tensor, enc: torch.Tensor, enc_padding_mask=None,
               dec_padding_mask=None) -> torch.Tensor:
        """Decoder output ``[b, s_dec, h]`` after the final norm (before the output scaling and head)."""
        x = self.embed_dropout(self.embed(dec_tokens))
        return self.decoder(x, dec_tokens.size(1), dec_padding_mask, enc=enc, enc_padding_mask=enc_padding_mask)

    def forward(self, enc_tokens: torch.Tensor, dec_tokens: torch.Tensor,
                labels: Optional[torch.Tensor] = None, loss_mask: Optional[torch.Tensor] = None,
                enc_padding_mask: Optional[torch.Tensor] = None, dec_padding_mask: Optional[torch.Tensor] = None,
                enc_hidden: Optional[torch.Tensor] = None):
        """Logits ``[b, s_dec, V]`` (vocab-sharded under TP) without labels, else ``(loss_sum, count)`` over
        the decoder positions with ``loss_mask`` (and ``labels >= 0``). ``enc_hidden`` reuses an encoder
        output (generation)."""
        enc = self.encode(enc_tokens, enc_padding_mask) if enc_hidden is None else enc_hidden
        y = self.decode(dec_tokens, enc, enc_padding_mask, dec_padding_mask)
        if self.cfg.tie_embeddings:
            y = y * self.cfg.hidden_size ** -0.5
        logits = self.head(y)
        if labels is None:
            return logits
        return self.loss_fn(logits, labels, loss_mask)


@register_arch("t5")
def _t5(cfg, vocab, padded, layer_ids, pre, post):
    return T5Model(cfg, vocab, padded, layer_ids, pre, post)
