"""The dual encoder: BERT question and context towers, pooling, optional projection, in-batch-negative loss.

A tower is mwb's :class:`~mwb.core.models.bert.BertModel` without its pretraining heads (pre-norm with a
final LayerNorm, or Hugging Face's post-norm layout), so everything that parallelises BERT applies to it
unchanged: :func:`build_biencoder` goes through :func:`mwb.core.compose.construct_sharded` like every
model (meta device → parallel plan → materialise), then the layout-independent init per tower. Parameter
names are BERT's under a ``query.`` / ``context.`` prefix, so a BERT checkpoint initialises either tower by
name and the checkpoint code (vocabulary padding, TP slicing) treats a bi-encoder like any other model.

Towers are separate by default (DPR, Megatron's ICT) or one shared module (``shared``; sentence-transformers
models such as all-MiniLM). Pooling is the [CLS] hidden state (DPR) or the mask-weighted mean
(sentence-transformers); ``projection_dim`` adds DPR's optional ``encode_proj`` linear layer and
``normalize`` L2-normalises embeddings (cosine similarity as inner product).

Loss. Each data-parallel rank scores its own questions against the contexts of *all* ranks, gathered with
:func:`~mwb.core.parallel.collectives.all_gather_with_grad` (in-batch negatives across DP). It returns the
token-style pair ``(Σ cross-entropy over its questions, number of questions)``: summed over ranks this is the
one-process loss of the concatenated batch (contexts concatenated in rank order, which is the order of
samples in the global batch), and the gather's backward sums every rank's contribution into each context, so
gradients agree too. Scores may be divided by √d (Megatron's ``--retriever-score-scaling``) or a temperature.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from mwb.core.config import ConfigError, ModelConfig
from mwb.core.models.bert import BertModel
from mwb.core.models.transformer import make_norm, padded_vocab_size
from mwb.core.parallel.collectives import all_gather_with_grad, gather_from_sequence, group_rank

POOLINGS = ("cls", "mean")
SCALINGS = ("none", "sqrt", "temperature")


@dataclass(frozen=True)
class RetrievalConfig:
    """Bi-encoder settings that the run config (model/parallel/optim/train) does not describe.

    Saved as ``biencoder/biencoder.json`` in every bi-encoder checkpoint, so a checkpoint alone says how
    to embed with it."""
    shared: bool = False            # one tower for questions and contexts
    pooling: str = "cls"            # cls | mean
    projection_dim: int = 0         # 0: no projection (embedding size = hidden size)
    normalize: bool = False         # L2-normalise embeddings
    score_scale: str = "none"       # none | sqrt (divide by √d) | temperature
    temperature: float = 1.0
    query_length: int = 32          # tokens per question, [CLS]/[SEP] included
    context_length: int = 128       # tokens per passage
    hard_negatives: int = 1         # DPR: hard negatives per question in training
    query_in_block_prob: float = 0.1  # ICT: chance the pseudo-query stays in its block

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ConfigError(f"pooling '{self.pooling}' is not one of {', '.join(POOLINGS)}")
        if self.score_scale not in SCALINGS:
            raise ConfigError(f"score scaling '{self.score_scale}' is not one of {', '.join(SCALINGS)}")
        if self.temperature <= 0:
            raise ConfigError("temperature must be positive")
        if self.query_length < 3 or self.context_length < 3:
            raise ConfigError("query and context lengths must be at least 3 tokens ([CLS] x [SEP])")
        if self.hard_negatives < 0 or self.projection_dim < 0:
            raise ConfigError("hard negatives and projection size cannot be negative")
        if not 0.0 <= self.query_in_block_prob <= 1.0:
            raise ConfigError("query_in_block_prob must lie in [0, 1]")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, tree: dict) -> "RetrievalConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(tree) - known)
        if unknown:
            raise ConfigError(f"unknown bi-encoder setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**tree)

    def replace(self, **kw) -> "RetrievalConfig":
        return dataclasses.replace(self, **{k: v for k, v in kw.items() if v is not None})


class Tower(BertModel):
    """A BERT encoder (embeddings + blocks + final norm in the pre-norm layout) → pooled embedding."""

    shares_embedding = False  # no output head: nothing is tied across pipeline stages

    def __init__(self, cfg: ModelConfig, vocab_size: int, padded_vocab: int, rcfg: RetrievalConfig) -> None:
        super().__init__(cfg, vocab_size, padded_vocab, pre_process=True, post_process=False)
        if not self.post_norm:
            self.final_norm = make_norm(cfg)
        self.pooling, self.normalize = rcfg.pooling, rcfg.normalize
        self.proj = nn.Linear(cfg.hidden_size, rcfg.projection_dim) if rcfg.projection_dim else None
        self._seq_group = None

    def parallelize_tp(self, state) -> None:
        """Under sequence parallelism the blocks hand back this rank's slice of the sequence: pooling needs
        all of it. Every TP rank then pools the same tensor, so the backward keeps only its own slice."""
        if state.sp:
            self._seq_group = state.tp_group

    @property
    def dim(self) -> int:
        return self.proj.out_features if self.proj is not None else self.cfg.hidden_size

    def forward(self, tokens: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = BertModel.forward(self, tokens=tokens, padding_mask=padding_mask)
        if not self.post_norm:
            x = self.final_norm(x)
        if self._seq_group is not None:
            x = gather_from_sequence(x, self._seq_group, grad_reduce=False)
        if self.pooling == "cls":
            pooled = x[:, 0]
        else:
            m = (torch.ones(x.shape[:2], device=x.device) if padding_mask is None else padding_mask).to(x.dtype)
            pooled = (x * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1.0)
        if self.proj is not None:
            pooled = self.proj(pooled)
        if self.normalize:
            pooled = F.normalize(pooled.float(), dim=-1).to(pooled.dtype)
        return pooled


class BiEncoder(nn.Module):
    """``query`` and ``context`` towers (one module when shared)."""

    def __init__(self, cfg: ModelConfig, rcfg: RetrievalConfig, vocab_size: int, padded_vocab: int) -> None:
        super().__init__()
        if cfg.arch != "bert":
            raise ConfigError(f"a bi-encoder is built from BERT towers; the config describes '{cfg.arch}'")
        self.cfg, self.rcfg, self.vocab_size = cfg, rcfg, vocab_size
        self.query = Tower(cfg, vocab_size, padded_vocab, rcfg)
        self.context = None if rcfg.shared else Tower(cfg, vocab_size, padded_vocab, rcfg)

    @property
    def context_tower(self) -> Tower:
        return self.query if self.context is None else self.context

    @property
    def dim(self) -> int:
        return self.query.dim

    def embed_queries(self, tokens: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.query(tokens, mask)

    def embed_contexts(self, tokens: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.context_tower(tokens, mask)

    def forward(self, q_tokens, q_mask, c_tokens, c_mask):
        return self.embed_queries(q_tokens, q_mask), self.embed_contexts(c_tokens, c_mask)


def score_divisor(rcfg: RetrievalConfig, dim: int) -> float:
    if rcfg.score_scale == "sqrt":
        return math.sqrt(dim)
    if rcfg.score_scale == "temperature":
        return float(rcfg.temperature)
    return 1.0


def in_batch_loss(q: torch.Tensor, c: torch.Tensor, contexts_per_query: int, divisor: float = 1.0,
                  group=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(Σ cross-entropy, #questions, #correct)`` of this rank's questions ``q [b, d]`` against every
    rank's contexts (``c [b·n, d]`` here; question i's positive is its row ``i·n``, the rest of its rows
    are hard negatives). See the module docstring for why sums over ranks equal the one-process loss."""
    b = q.size(0)
    if c.size(0) != b * contexts_per_query:
        raise ValueError(f"{c.size(0)} contexts for {b} questions × {contexts_per_query} contexts each")
    all_c = all_gather_with_grad(c, group)
    scores = q.float() @ all_c.float().t() / divisor
    offset = group_rank(group) * c.size(0)
    targets = offset + torch.arange(b, device=q.device) * contexts_per_query
    loss_sum = F.cross_entropy(scores, targets, reduction="sum")
    correct = (scores.detach().argmax(-1) == targets).sum()
    return loss_sum, torch.tensor(float(b), device=q.device), correct


def build_biencoder(cfg: ModelConfig, rcfg: RetrievalConfig, state, vocab_size: int, seed: int, device="cpu",
                    dtype: Optional[torch.dtype] = None) -> BiEncoder:
    """The bi-encoder for this rank, initialised exactly like the one-process model (mirrors build_model)."""
    from mwb.core.compose import construct_sharded
    from mwb.core.models.init import initialize

    padded = padded_vocab_size(vocab_size, cfg.make_vocab_size_divisible_by, state.tp_size)
    model = construct_sharded(lambda: BiEncoder(cfg, rcfg, vocab_size, padded), cfg, state, device, dtype)
    # Each tower is initialised under its own (tower-relative) names, so separate towers start identical,
    # as DPR's two encoders start from one BERT: at step 0 a passage then scores highest against text that
    # it contains, which training sharpens. Independently drawn towers start unaligned and, from scratch,
    # barely learn.
    for tower in (model.query, model.context):
        if tower is not None:
            initialize(tower, seed, cfg.init_std, cfg.num_layers, False, real_vocab=vocab_size)
    return model


@torch.no_grad()
def embed_texts(model: BiEncoder, which: str, batches, device="cpu") -> torch.Tensor:
    """fp32 embeddings of ``batches`` (an iterable of ``(tokens, mask)`` int arrays) by one tower."""
    fn = model.embed_queries if which == "query" else model.embed_contexts
    out = []
    for tokens, mask in batches:
        t = torch.as_tensor(tokens, device=device)
        m = torch.as_tensor(mask, device=device)
        out.append(fn(t, m).float().cpu())
    return torch.cat(out) if out else torch.zeros(0, model.dim)
