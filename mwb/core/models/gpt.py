"""GPT: a decoder-only language model, buildable whole or as one pipeline stage.

A stage holds the layers ``layer_ids`` (global numbers, so parameter names are the same in every layout:
``layers.7.attn.q_proj.weight`` is layer 7 wherever it lives), the embedding if it is the first stage and
the final norm, output head and loss if it is the last. With tied embeddings a last stage that is not also
the first keeps its own copy of the word embeddings as ``head.weight``; the pipeline keeps the copies equal.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from ..config import ModelConfig
from .transformer import (CrossEntropy, Embedding, KVCache, TiedEmbeddingStage, TransformerBlock, document_mask,
                          make_norm, padding_mask)


class GPTModel(TiedEmbeddingStage, nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, padded_vocab_size: Optional[int] = None,
                 layer_ids: Optional[Sequence[int]] = None, pre_process: bool = True,
                 post_process: bool = True) -> None:
        super().__init__()
        self.init_stage(cfg, vocab_size, padded_vocab_size, pre_process, post_process)
        ids = list(range(cfg.num_layers)) if layer_ids is None else list(layer_ids)
        if pre_process:
            self.embed = Embedding(cfg, self.padded_vocab_size)
            self.embed_dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg, i, causal=True) for i in ids})
        if post_process:
            self.final_norm = make_norm(cfg)
            self.head = nn.Linear(cfg.hidden_size, self.padded_vocab_size, bias=False)
            self.loss_fn = CrossEntropy(vocab_size)
        self.tie_weights()

    def forward(self, tokens: Optional[torch.Tensor] = None, labels: Optional[torch.Tensor] = None,
                hidden: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                loss_mask: Optional[torch.Tensor] = None, cache: Optional[KVCache] = None,
                attention_mask: Optional[torch.Tensor] = None, logits_to_keep: int = 0,
                document_ids: Optional[torch.Tensor] = None):
        """First stage: ``tokens [b, s]``; other stages: ``hidden [b, s, h]`` from the previous stage.
        Returns hidden states (not last stage), logits (last stage, no labels) or ``(loss_sum, count)``.

        ``attention_mask [b, past + s]`` (true/1 = real token) hides pad keys of left-padded batches; pass
        per-row ``position_ids [b, s]`` with it so a padded row computes what it computes alone. Without
        it attention takes the plain causal path. ``logits_to_keep > 0`` returns the logits of the last
        that many positions only (generation needs the last one; the head is the costliest matmul).
        ``document_ids [b, s]``: packed rows (:mod:`mwb.core.data.packing`), each token attending only to the
        tokens of its own document; pass the per-document ``position_ids`` with them."""
        seq = tokens.size(1) if tokens is not None else self.full_seq_len(hidden)
        if position_ids is None:
            start = cache.length() if cache is not None else 0
            dev = tokens.device if tokens is not None else hidden.device
            position_ids = torch.arange(start, start + seq, device=dev)[None]
        if self.pre_process:
            x = self.embed_dropout(self.embed(tokens, position_ids))
        else:
            x = hidden
        rope = self.rope_for(position_ids[0] if position_ids.dim() == 2 and position_ids.size(0) == 1
                             else position_ids)
        mask = None if attention_mask is None else padding_mask(attention_mask.to(x.device), x.size(1))
        if document_ids is not None:
            docs = document_mask(document_ids.to(x.device))
            mask = docs if mask is None else mask & docs
        for layer in self.layers.values():
            x = layer(x, mask=mask, rope=rope, cache=cache)
        if not self.post_process:
            return x
        if labels is None:
            return self.head(self.final_norm(x[:, -logits_to_keep:] if logits_to_keep else x))
        return self.loss_fn.head_loss(self.final_norm(x), self.head, labels, loss_mask)
