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
vocab projection (``model.t5_scale_decoder_output`` sets that scaling on its own: a T5 v1.1 checkpoint saved
by recent ``transformers`` ties the head yet does not scale). Two options exist for megatron-core's T5:
``model.t5_head_bias`` gives the head a vocab bias (its tied ``lm_head.output_layer.bias``) and
``model.t5_final_norm: false`` drops the stacks' final norms (its local spec without Transformer Engine has
none); both default to the T5 layout. Padding masks are key masks (see :mod:`.bert`). Tensor parallelism: the generic pass
shards projections, embedding, head and loss; :mod:`mwb.core.parallel.tensor_parallel` also shards each
bias table over heads (this module knows nothing of parallelism).

Pipeline parallelism. The encoder layers followed by the decoder layers form one sequence of
``num_layers + num_decoder_layers`` layers (decoder layer ids already continue after the encoder's), which
the stages split like GPT's (``layer_ids``). Parameter names are the one-process names of whatever a stage
holds (``decoder.layers.1.*`` wherever that layer lives), so checkpoints reshard between layouts. Stages
exchange one tensor, so the generic schedule and point-to-point code need nothing T5-specific: the encoder
and decoder hidden states concatenated along the sequence, ``[b, s_enc + s_dec, h]``. The first stage
embeds both inputs (one shared embedding, with the learned positions of Megatron's T5); the stage with the
last encoder layer applies the encoder's final norm and dropout; decoder layers read the (final) encoder
part as cross-attention memory and update the decoder part; a stage passes on unchanged the part it does
not compute (autograd still routes its gradient back). The last stage applies the decoder's final norm,
the output scaling, the head and the loss; with tied embeddings its ``head.weight`` is a copy of the first
stage's word embedding, kept equal over the embedding group (:class:`TiedEmbeddingStage`, as GPT/BERT).
Each stage with encoder (decoder) layers holds a copy of the encoder (decoder) bias table under the same
name: equal at initialisation, their gradients summed over the holding stages by the optimizer
(:mod:`mwb.core.parallel.stage_copies`), so they stay equal to the one-process table. Interleaved
stages (vpp > 1) work the same way: a stage is just a range of the layer sequence.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..errors import LayoutError
from .transformer import CrossEntropy, Embedding, KVCache, TiedEmbeddingStage, TransformerBlock, make_norm


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
        # a usable default for a model built on its own; build_model's initialize() overwrites it
        self.weight = nn.Parameter(torch.empty(self.num_buckets, cfg.num_attention_heads).normal_(std=cfg.init_std))

    def forward(self, q_len: int, k_len: int, device, q_start: int = 0) -> torch.Tensor:
        """Queries at positions ``q_start …`` (past a KV cache), keys at ``0 … k_len-1``."""
        queries = torch.arange(q_start, q_start + q_len, device=device)
        rel = torch.arange(k_len, device=device)[None, :] - queries[:, None]
        buckets = relative_position_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        return F.embedding(buckets, self.weight).permute(2, 0, 1)[None]


def _additive(bias: Optional[torch.Tensor], keep: Optional[torch.Tensor], dtype) -> Optional[torch.Tensor]:
    """Combine a float bias and a bool key mask (True = attend) into one SDPA mask. Masked keys get the
    dtype's most negative finite value, not -inf, so a fully padded row stays finite."""
    if bias is None:
        return keep
    bias = bias.to(dtype)
    return bias if keep is None else bias.masked_fill(~keep, torch.finfo(dtype).min)


class T5Stack(nn.Module):
    """One side of the model, or the part of it that a pipeline stage holds: its layers (``layers``, keyed
    by index within the stack, the name recomputation looks for), the relative bias table shared by those
    layers, and, on the stage holding the stack's last layer (``final``), the final norm and dropout."""

    def __init__(self, cfg: ModelConfig, first_id: int, ids: Sequence[int], decoder: bool, relative: bool,
                 final: bool = True) -> None:
        super().__init__()
        scale = 1.0 if relative else None
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg, first_id + i, causal=decoder,
                                                              cross_attention=decoder, attn_scale=scale)
                                     for i in ids})
        self.relative_bias = RelativePositionBias(cfg, bidirectional=not decoder) if relative else None
        self.final = final
        if final:  # megatron-core's local (non-Transformer-Engine) spec builds its blocks without one
            self.norm = make_norm(cfg) if cfg.t5_final_norm else nn.Identity()
            self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, seq_len: int, padding_mask: Optional[torch.Tensor] = None,
                enc: Optional[torch.Tensor] = None, enc_padding_mask: Optional[torch.Tensor] = None,
                cache: Optional[KVCache] = None):
        """``seq_len`` is the full length (``x`` holds a sequence slice under SP). With ``cache`` (decoder,
        generation) ``x`` continues the cached positions and ``padding_mask`` covers cached + new keys."""
        past = cache.length() if cache is not None else 0
        keep = None if padding_mask is None else padding_mask.bool()[:, None, None, :]
        bias = None if self.relative_bias is None else self.relative_bias(seq_len, past + seq_len, x.device, past)
        mask = _additive(bias, keep, x.dtype)
        cross = None if enc_padding_mask is None else enc_padding_mask.bool()[:, None, None, :]
        for layer in self.layers.values():
            x = layer(x, mask=mask) if enc is None else layer(x, mask=mask, enc=enc, cross_mask=cross, cache=cache)
        return self.dropout(self.norm(x)) if self.final else x


class T5Model(TiedEmbeddingStage, nn.Module):
    """The whole model, or one pipeline stage of it (see the module docstring)."""

    # held by every stage that runs layers of that stack: kept equal by the optimizer (parallel.stage_copies)
    stage_copy_names = ("encoder.relative_bias.weight", "decoder.relative_bias.weight")

    def __init__(self, cfg: ModelConfig, vocab_size: int, padded_vocab_size: Optional[int] = None,
                 layer_ids: Optional[Sequence[int]] = None, pre_process: bool = True,
                 post_process: bool = True) -> None:
        super().__init__()
        if cfg.position_embedding not in ("relative", "learned"):
            raise ValueError(f"T5 positions must be 'relative' (T5) or 'learned' (Megatron T5), got "
                             f"'{cfg.position_embedding}'")
        self.init_stage(cfg, vocab_size, padded_vocab_size, pre_process, post_process)
        relative = cfg.position_embedding == "relative"
        n_enc, n_dec = cfg.num_layers, cfg.num_decoder_layers or cfg.num_layers
        ids = list(range(n_enc + n_dec)) if layer_ids is None else list(layer_ids)
        if not ids or ids != list(range(ids[0], ids[0] + len(ids))) or ids[-1] >= n_enc + n_dec:
            raise LayoutError(f"T5 stage layers {ids} must be consecutive ids below encoder + decoder layers "
                              f"= {n_enc} + {n_dec}")
        if pre_process != (ids[0] == 0) or post_process != (ids[-1] == n_enc + n_dec - 1):
            raise LayoutError(f"T5 stage with layers {ids}: the embedding belongs with layer 0 and the head "
                              f"with layer {n_enc + n_dec - 1}")
        enc_ids = [i for i in ids if i < n_enc]
        dec_ids = [i - n_enc for i in ids if i >= n_enc]
        if pre_process:  # learned positions (Megatron T5) only when configured; shared by both inputs
            self.embed = Embedding(cfg, self.padded_vocab_size)
            self.embed_dropout = nn.Dropout(cfg.dropout)
        self.encoder = T5Stack(cfg, 0, enc_ids, decoder=False, relative=relative,
                               final=n_enc - 1 in enc_ids) if enc_ids else None
        # decoder layer ids continue after the encoder's so every Attention.layer_id is unique
        self.decoder = T5Stack(cfg, n_enc, dec_ids, decoder=True, relative=relative,
                               final=post_process) if dec_ids else None
        if post_process:
            # megatron-core's T5 head has a vocab bias (vocab-parallel under TP, as BERT's head bias)
            self.head = nn.Linear(cfg.hidden_size, self.padded_vocab_size, bias=cfg.t5_head_bias)
            self.loss_fn = CrossEntropy(vocab_size)
        self.tie_weights()

    def encode(self, enc_tokens: torch.Tensor, enc_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Encoder output ``[b, s_enc, h]`` (a sequence slice under SP); whole model only."""
        x = self.embed_dropout(self.embed(enc_tokens))
        return self.encoder(x, enc_tokens.size(1), enc_padding_mask)

    def decode(self, dec_tokens: torch.Tensor, enc: torch.Tensor, enc_padding_mask=None,
               dec_padding_mask=None, cache: Optional[KVCache] = None) -> torch.Tensor:
        """Decoder output ``[b, s_dec, h]`` after the final norm (before the output scaling and head).
        With ``cache`` the tokens continue the cached ones (their positions start after them)."""
        past = cache.length() if cache is not None else 0
        positions = torch.arange(past, past + dec_tokens.size(1), device=dec_tokens.device)[None]
        x = self.embed_dropout(self.embed(dec_tokens, positions))
        return self.decoder(x, dec_tokens.size(1), dec_padding_mask, enc=enc, enc_padding_mask=enc_padding_mask,
                            cache=cache)

    def decoder_logits(self, dec_tokens: torch.Tensor, enc: torch.Tensor, enc_padding_mask=None,
                       cache: Optional[KVCache] = None) -> torch.Tensor:
        """Logits ``[b, s_dec, V]`` (vocab-sharded under TP) of decoder tokens over a computed encoder
        output: step by step generation with a :class:`KVCache` (whole model only)."""
        return self._logits(self.decode(dec_tokens, enc, enc_padding_mask, cache=cache))

    def _logits(self, dec: torch.Tensor) -> torch.Tensor:
        scale = self.cfg.t5_scale_decoder_output  # None: T5's rescaling exactly when the head is tied
        if self.cfg.tie_embeddings if scale is None else scale:
            dec = dec * self.cfg.hidden_size ** -0.5
        return self.head(dec)

    def forward(self, enc_tokens: torch.Tensor, dec_tokens: torch.Tensor,
                labels: Optional[torch.Tensor] = None, loss_mask: Optional[torch.Tensor] = None,
                enc_padding_mask: Optional[torch.Tensor] = None, dec_padding_mask: Optional[torch.Tensor] = None,
                enc_hidden: Optional[torch.Tensor] = None, hidden: Optional[torch.Tensor] = None):
        """Logits ``[b, s_dec, V]`` (vocab-sharded under TP) without labels, else ``(loss_sum, count)`` over
        the decoder positions with ``loss_mask`` (and ``labels >= 0``). ``enc_hidden`` reuses an encoder
        output (generation). A pipeline stage other than the first gets the previous stage's message as
        ``hidden`` (the token tensors still give the lengths and masks); one other than the last returns its
        message, ``[b, s_enc + s_dec, h]``: encoder part, then decoder part (local slices under SP)."""
        s_enc, s_dec = enc_tokens.size(1), dec_tokens.size(1)
        if self.pre_process:
            enc = self.embed_dropout(self.embed(enc_tokens)) if enc_hidden is None else enc_hidden
        else:  # both parts are split the same way under SP, so the encoder part is s_enc/(s_enc+s_dec)
            n = hidden.size(1) * s_enc // (s_enc + s_dec)
            enc, dec = hidden[:, :n], hidden[:, n:]
        if self.encoder is not None and enc_hidden is None:
            enc = self.encoder(enc, s_enc, enc_padding_mask)
        if self.pre_process:  # after the encoder, as in encode-then-decode (same dropout draws)
            dec = self.embed_dropout(self.embed(dec_tokens))
        if self.decoder is not None:
            dec = self.decoder(dec, s_dec, dec_padding_mask, enc=enc, enc_padding_mask=enc_padding_mask)
        if not self.post_process:
            return torch.cat([enc, dec], dim=1)
        logits = self._logits(dec)
        if labels is None:
            return logits
        return self.loss_fn(logits, labels, loss_mask)
