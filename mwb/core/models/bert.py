"""BERT: a bidirectional encoder with the masked-LM head and an optional sentence-order / NSP head.

Norm placement. The default is Megatron's BERT: pre-norm blocks (the shared :class:`TransformerBlock`), no
norm on the embeddings and a final LayerNorm after the last layer, which trains stably at depth. With
``model.bert_post_norm`` the model has Hugging Face BERT's layout instead (LayerNorm on the summed
embeddings, ``x = LN(x + sublayer(x))`` in every block, no final norm), so weights converted from
``transformers.BertForPreTraining`` give the same outputs. Both variants have the same parameter names
(``ln1``/``ln2`` are the post-attention/post-MLP norms in the post-norm layout).

Positions. Learned absolute positions (BERT, the bert-base/large presets) or rotary ones
(``position_embedding: rope``, as ModernBERT), which the bert-tiny preset uses: on a small corpus they let
the masked LM leave its unigram plateau within a few hundred steps (see :mod:`mwb.core.presets`).

Heads. The MLM head is ``lm_transform`` (dense h→h, gelu, LayerNorm) followed by ``head``, the final vocab
projection tied to the word embeddings with its own output bias. Keeping ``head`` a plain ``nn.Linear`` next
to ``loss_fn`` lets the generic tensor-parallel pass shard it over the vocabulary and use the vocab-parallel
cross-entropy, exactly as for GPT. The binary head is a pooler (dense + tanh on the first, [CLS], token)
followed by a 2-way linear, ``binary_classifier`` (not ``*head``: names ending in ``head.weight`` mean
"the tied output head" to the initialiser and optimizer); both are small and stay replicated under TP.
A checkpoint converted from a plain Hugging Face ``BertModel`` (sentence-transformers, MiniLM) has no MLM
head: ``model.bert_lm_head: false`` builds the model without one, so nothing pretends an untrained head was
trained, and ``model.bert_pooler`` keeps its pooler without a binary head. Such a model is an encoder
(``return_hidden``) for fine-tuning and retrieval; asking it for MLM logits is an error.

Sparse prediction. With labels, the MLM transform and the vocabulary projection run only on the
positions that are predicted (~15%), not on the whole sequence: the loss is the same, and on a small model
the vocab projection is most of a step's work (Megatron computes all positions; the "Cramming" BERT recipe
and NVIDIA's BERT gather the masked positions first). Under sequence parallelism each rank holds a sequence
slice that the head gathers itself, so the full-sequence path is kept there.

Padding. ``padding_mask`` (1 = real token) becomes a key mask: no position ever attends to a padded key, so
padding never changes the output at real positions. Padded queries still attend to real keys (masking whole
rows would make softmax undefined); their outputs are never used by a loss.

Loss. Megatron's BERT reports ``mean LM loss + mean sentence-order loss`` of a micro-batch. To fit the
``(loss_sum, count)`` convention, the per-sample binary losses are added to the LM token-loss sum with
weight ``max(count, 1) / n_samples``, so ``loss_sum / max(count, 1)`` is exactly that Megatron quantity
(a batch without masked tokens reports the binary loss alone, where Megatron would report NaN).

Pipeline stages follow :mod:`.gpt`: layers keyed by global id; the first stage holds the embeddings, the
last the final norm and both heads (and, when tied and not also first, its own copy of the word embedding
as ``head.weight``, which the optimizer keeps equal to the first stage's).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .transformer import CrossEntropy, Embedding, TiedEmbeddingStage, TransformerBlock, make_norm


class PostNormBlock(TransformerBlock):
    """Hugging Face BERT's block: ``x = ln1(x + attn(x)); x = ln2(x + mlp(x))``.

    A subclass of the pre-norm block, with the same submodules, so every parallel pass and recomputation
    that understands :class:`TransformerBlock` (TP projections, sharded dropout under SP) applies unchanged.
    """

    def forward(self, x: torch.Tensor, mask=None, rope=None, cache=None, enc=None, cross_mask=None):
        x = self.ln1(x + self.drop1(self.attn(x, mask=mask, rope=rope, cache=cache)))
        return self.ln2(x + self.drop2(self.mlp(x)))


class LMTransform(nn.Module):
    """The MLM head's transform before the vocabulary projection: dense h→h, gelu, LayerNorm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))


class Pooler(nn.Module):
    """tanh(dense(hidden of the first token)): the sentence representation for the binary head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(TiedEmbeddingStage, nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, padded_vocab_size: Optional[int] = None,
                 layer_ids: Optional[Sequence[int]] = None, pre_process: bool = True,
                 post_process: bool = True) -> None:
        super().__init__()
        if cfg.position_embedding not in ("learned", "rope"):
            raise ValueError(f"BERT positions are 'learned' (BERT) or 'rope' (rotary, as ModernBERT); got "
                             f"position_embedding='{cfg.position_embedding}'")
        self.init_stage(cfg, vocab_size, padded_vocab_size, pre_process, post_process)
        self.post_norm = bool(getattr(cfg, "bert_post_norm", False))
        ids = list(range(cfg.num_layers)) if layer_ids is None else list(layer_ids)
        if pre_process:
            self.embed = Embedding(cfg, self.padded_vocab_size, tokentypes=cfg.num_tokentypes)
            if self.post_norm:
                self.embed_norm = make_norm(cfg)
            self.embed_dropout = nn.Dropout(cfg.dropout)
        block = PostNormBlock if self.post_norm else TransformerBlock
        self.layers = nn.ModuleDict({str(i): block(cfg, i, causal=False) for i in ids})
        self.binary_classifier = self.pooler = None
        self.has_lm_head = bool(getattr(cfg, "bert_lm_head", True))
        if post_process:
            if not self.post_norm:
                self.final_norm = make_norm(cfg)
            if self.has_lm_head:
                self.lm_transform = LMTransform(cfg)
                self.head = nn.Linear(cfg.hidden_size, self.padded_vocab_size, bias=True)
                self.loss_fn = CrossEntropy(vocab_size)
            if cfg.bert_binary_head or getattr(cfg, "bert_pooler", False):
                self.pooler = Pooler(cfg)
            if cfg.bert_binary_head:
                self.binary_classifier = nn.Linear(cfg.hidden_size, 2)
        if self.has_lm_head:
            self.tie_weights()

    @property
    def shares_embedding(self) -> bool:
        """Without the masked-LM head no stage holds a copy of the word embedding."""
        return self.has_lm_head and super().shares_embedding

    def forward(self, tokens: Optional[torch.Tensor] = None, types: Optional[torch.Tensor] = None,
                padding_mask: Optional[torch.Tensor] = None, labels: Optional[torch.Tensor] = None,
                loss_mask: Optional[torch.Tensor] = None, nsp_labels: Optional[torch.Tensor] = None,
                return_hidden: bool = False, hidden: Optional[torch.Tensor] = None, parts: bool = False):
        """First stage: ``tokens [b, s]`` (+ ``types``); later stages: ``hidden`` from the previous one.

        Returns the hidden states on a stage that is not last; otherwise ``(hidden, pooled)`` with
        ``return_hidden`` (``pooled`` is None without a binary head; under SP ``hidden`` is this rank's
        sequence slice), ``(lm_logits, binary_logits)`` without labels (logits vocab-sharded under TP), or
        ``(loss_sum, count)`` with labels, where ``loss_sum / max(count, 1)`` = mean LM + mean binary loss
        (with ``parts``, the separate sums of :meth:`loss_parts` instead).
        """
        seq = tokens.size(1) if tokens is not None else self.full_seq_len(hidden)
        pos = torch.arange(seq, device=(tokens if tokens is not None else hidden).device)
        if self.pre_process:
            x = self.embed(tokens, pos[None], types)
            if self.post_norm:
                x = self.embed_norm(x)
            x = self.embed_dropout(x)
        else:
            x = hidden
        mask = None if padding_mask is None else padding_mask.bool()[:, None, None, :]
        rope = self.rope_for(pos)
        for layer in self.layers.values():
            x = layer(x, mask=mask, rope=rope)
        if not self.post_process:
            return x
        if not self.post_norm:
            x = self.final_norm(x)
        pooled = self.pooler(x) if self.pooler is not None else None
        if return_hidden:
            return x, pooled
        if not self.has_lm_head:
            raise ValueError("this BERT has no masked-LM head (model.bert_lm_head=false: converted from a plain "
                             "BertModel); use it as an encoder (fine-tuning, retrieval), not for MLM")
        binary_logits = self.binary_classifier(pooled) if self.binary_classifier is not None else None
        if labels is None:
            return self.head(self.lm_transform(x)), binary_logits
        if self.seq_shards == 1:  # sparse prediction: the vocab projection only where a token is predicted
            keep = labels >= 0 if loss_mask is None else (labels >= 0) & loss_mask.bool()
            x, labels, loss_mask = x[keep], labels[keep], None
        lm_logits = self.head(self.lm_transform(x))
        if parts:
            return self.loss_parts(lm_logits, binary_logits, labels, loss_mask, nsp_labels)
        return self.pretraining_loss(lm_logits, binary_logits, labels, loss_mask, nsp_labels)

    def pretraining_loss(self, lm_logits, binary_logits, labels, loss_mask=None, nsp_labels=None):
        """``(Σ MLM token losses + max(count,1)·mean binary loss, count)``; see the module docstring."""
        parts = self.loss_parts(lm_logits, binary_logits, labels, loss_mask, nsp_labels)
        loss_sum, count = parts["lm"]
        if "binary" in parts:
            sop, n = parts["binary"]
            loss_sum = loss_sum + sop * (count.clamp(min=1) / n.clamp(min=1))
        return loss_sum, count

    def loss_parts(self, lm_logits, binary_logits, labels, loss_mask=None, nsp_labels=None) -> dict:
        """``{"lm": (Σ MLM token losses, tokens), "binary": (Σ sample losses, samples)}`` (no "binary"
        without a binary head or labels): what Megatron logs as "lm loss" and "sop loss"."""
        parts = {"lm": self.loss_fn(lm_logits, labels, loss_mask)}
        if binary_logits is not None and nsp_labels is not None:
            nsp_labels = nsp_labels.reshape(-1).long()
            sop = F.cross_entropy(binary_logits.float(), nsp_labels, ignore_index=-1, reduction="sum")
            parts["binary"] = (sop, (nsp_labels >= 0).sum().to(sop.dtype))
        return parts
