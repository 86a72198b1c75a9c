"""Where bi-encoder weights come from: Hugging Face BERT directories, mwb BERT checkpoints, mwb bi-encoders.

:func:`open_source` reads any of these as an :class:`EncoderSource`: the BERT model config, vocabulary,
tokenizer, the bi-encoder settings it implies and ``tensor(tower, name)``, which returns the global
(unpadded) tensor for parameter ``name`` of one tower in mwb's BERT naming. A BERT (either kind) feeds both
towers with the same weights, as DPR initialises both encoders from one BERT; a bi-encoder checkpoint maps
tower to tower (a shared one feeds both). :func:`fill_biencoder` then copies the tensors into a model of any
tensor-parallel layout with the checkpoint code's own slicing and vocabulary padding.

Hugging Face directories: any ``BertModel``/``BertFor*`` checkpoint (``bert.`` prefix or none; the MLM head
and pooler are ignored). A sentence-transformers directory (``1_Pooling/config.json``, ``modules.json``)
also says its pooling and whether it normalises, so all-MiniLM-L6-v2 embeds exactly as it was trained.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from mwb.core.config import ConfigError, RunConfig, update
from mwb.core.errors import CheckpointError

from .biencoder import RetrievalConfig

CONFIG_NAME = "biencoder.json"
TOWERS = ("query", "context")


@dataclass
class EncoderSource:
    kind: str                      # "hf" | "mwb-bert" | "mwb-biencoder"
    path: str
    cfg: RunConfig
    vocab_size: int
    rcfg: RetrievalConfig
    tokenizer: Optional[str]
    description: str
    _get: Callable[[str, str], Optional[torch.Tensor]] = field(repr=False, default=None)
    own_settings: bool = False     # the source says how it embeds (bi-encoder / sentence-transformers)

    def tensor(self, tower: str, name: str) -> Optional[torch.Tensor]:
        """Global tensor of ``tower``'s parameter ``name`` (BERT naming), or None if the source lacks it."""
        return self._get(tower, name)


# ------------------------------------------------------------------------------------- Hugging Face


def _hf_pairs(num_layers: int):
    yield "embeddings.word_embeddings.weight", "embed.word.weight"
    yield "embeddings.position_embeddings.weight", "embed.position.weight"
    yield "embeddings.token_type_embeddings.weight", "embed.tokentype.weight"
    for s in ("weight", "bias"):
        yield f"embeddings.LayerNorm.{s}", f"embed_norm.{s}"
    from mwb.core.convert.bert import layer_pairs
    for i in range(num_layers):
        yield from layer_pairs(i, hf_prefix="")


def _sentence_transformers_settings(path: str) -> dict:
    """Pooling / normalisation / max length declared by a sentence-transformers directory, if any."""
    out = {}
    pool = os.path.join(path, "1_Pooling", "config.json")
    if os.path.isfile(pool):
        with open(pool) as f:
            p = json.load(f)
        if p.get("pooling_mode_mean_tokens"):
            out["pooling"] = "mean"
        elif p.get("pooling_mode_cls_token"):
            out["pooling"] = "cls"
        else:
            raise ConfigError(f"{pool}: only CLS or mean pooling is supported")
    modules = os.path.join(path, "modules.json")
    if os.path.isfile(modules):
        with open(modules) as f:
            out["normalize"] = any(str(m.get("type", "")).endswith("Normalize") for m in json.load(f))
    st = os.path.join(path, "sentence_bert_config.json")
    if os.path.isfile(st):
        with open(st) as f:
            n = json.load(f).get("max_seq_length")
        if n:
            out["context_length"] = int(n)
    return out


def _open_hf(path: str) -> EncoderSource:
    from mwb.core.convert.bert import model_config
    from mwb.core.convert.hf_io import read_config, read_weights, tokenizer_files

    hf = read_config(path)
    if hf.get("model_type") != "bert":
        raise ConfigError(f"{path}: model_type '{hf.get('model_type')}' is not a BERT encoder; the retriever "
                          f"imports BERT-family checkpoints (BertModel, BertForMaskedLM, ...)")
    model = model_config(hf)
    model["bert_binary_head"] = False
    cfg = update(RunConfig(), {"model": model})
    sd = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
          for k, v in read_weights(path).items()}
    if any(k.startswith("bert.") for k in sd):
        sd = {k[len("bert."):]: v for k, v in sd.items() if k.startswith("bert.")}
    names = dict((b, a) for a, b in _hf_pairs(model["num_layers"]))
    missing = [a for a in names.values() if a not in sd]
    if missing:
        raise CheckpointError(f"{path}: BERT weights lack {', '.join(missing[:3])}"
                              f"{' …' if len(missing) > 3 else ''}")
    st = _sentence_transformers_settings(path)
    ctx = min(int(st.pop("context_length", 256)), int(model["max_position_embeddings"]))
    if st.get("normalize"):  # cosine scores: sentence-transformers trains them ×20 (MultipleNegativesRankingLoss)
        st.update(score_scale="temperature", temperature=0.05)
    rcfg = RetrievalConfig(shared=True, query_length=min(64, ctx), context_length=ctx, **st)
    what = "sentence-transformers" if st else "Hugging Face BERT"
    desc = (f"{what} encoder {path} ({model['num_layers']} layers, hidden {model['hidden_size']}, "
            f"{rcfg.pooling} pooling{', normalised' if rcfg.normalize else ''})")
    tok = path if tokenizer_files(path) else None
    return EncoderSource("hf", path, cfg, int(model["vocab_size"]), rcfg, tok, desc,
                         lambda tower, name: sd.get(names[name]) if name in names else None, bool(st))


# --------------------------------------------------------------------------------------------- mwb


def biencoder_settings(step_dir: str) -> Optional[RetrievalConfig]:
    path = os.path.join(step_dir, "biencoder", CONFIG_NAME)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return RetrievalConfig.from_dict(json.load(f))


def _open_mwb(path: str) -> EncoderSource:
    from mwb.core.checkpoint import Checkpoint
    from mwb.core.checkpoint.consolidate import resolve
    from mwb.core.checkpoint.format import tokenizer_path

    ck = Checkpoint(resolve(path))
    tree = ck.meta.get("config") or {}
    cfg = update(RunConfig(), {k: v for k, v in tree.items() if k in ("model", "parallel", "optim", "train",
                                                                        "data", "logging")})
    if cfg.model.arch != "bert":
        raise ConfigError(f"{path} holds a '{cfg.model.arch}' model; a retriever needs BERT (or a bi-encoder "
                          f"trained by `mwb pretrain ict` / `mwb finetune dpr`)")
    vocab = int(ck.meta["vocab_size"])
    tok = tokenizer_path(ck.directory, ck.meta)
    rcfg = biencoder_settings(ck.directory)
    have = set(ck.tensors)

    def read(name):
        return ck.model_tensor(name) if name in have else None

    if rcfg is None:  # a plain BERT: both towers from it
        desc = f"mwb BERT checkpoint {ck.directory} (both towers from one BERT, [CLS] pooling)"
        return EncoderSource("mwb-bert", ck.directory, cfg, vocab,
                             RetrievalConfig(shared=True, context_length=min(256, cfg.model.max_position_embeddings)),
                             tok, desc, lambda tower, name: read(name))
    shared = rcfg.shared
    desc = (f"mwb bi-encoder {ck.directory} (step {ck.step}, {'shared' if shared else 'separate'} towers, "
            f"{rcfg.pooling} pooling)")
    return EncoderSource("mwb-biencoder", ck.directory, cfg, vocab, rcfg, tok, desc,
                         lambda tower, name: read(f"{'query' if shared else tower}.{name}"), True)


def open_source(path: str) -> EncoderSource:
    """Read ``path`` (HF BERT directory, mwb BERT or bi-encoder checkpoint: run, checkpoints or step dir, or a
    model name such as ``minilm-l6``)."""
    from mwb.core.convert import is_hf_dir
    from mwb.core.named_models import local_checkpoint

    path = os.path.abspath(os.path.expanduser(str(local_checkpoint(path))))
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    return _open_hf(path) if is_hf_dir(path) else _open_mwb(path)


# --------------------------------------------------------------------------------------- filling


@torch.no_grad()
def fill_biencoder(model, source: EncoderSource, allow_missing: tuple = ("proj.",)) -> list[str]:
    """Copy ``source``'s weights into ``model`` (any TP layout); returns names left at their init (only
    parameters matching ``allow_missing``, e.g. a new projection layer)."""
    from mwb.core.checkpoint.shards import local_slice, unpadded_shape

    kept = []
    for full_name, p in model.named_parameters():
        tower, _, name = full_name.partition(".")
        full = source.tensor(tower, name)
        if full is None:
            if any(name.startswith(a) for a in allow_missing):
                kept.append(full_name)
                continue
            raise CheckpointError(f"{source.path} has no weights for {full_name} ({source.kind}); the model "
                                  f"settings differ from the checkpoint's")
        want = unpadded_shape(name, p, source.vocab_size)
        if tuple(full.shape) != tuple(want):
            raise CheckpointError(f"{source.path}: {full_name} has shape {list(full.shape)}, the model needs "
                                  f"{list(want)}")
        p.data.copy_(local_slice(full, p).to(p.dtype))
    return kept


def load_biencoder(path, device="cpu", rcfg: Optional[RetrievalConfig] = None):
    """``(source, single-process bi-encoder in eval mode)`` for inference from any supported ``path`` (or an
    already opened :class:`EncoderSource`); ``rcfg`` overrides the settings the source implies."""
    from mwb.core.parallel.state import single_process_state

    from .biencoder import build_biencoder

    source = path if isinstance(path, EncoderSource) else open_source(path)
    rcfg = rcfg or source.rcfg
    model = build_biencoder(source.cfg.model, rcfg, single_process_state(), source.vocab_size,
                            source.cfg.train.seed, device="cpu")
    fill_biencoder(model, source)
    return source, model.to(device).eval()


def biencoder_tensors(model) -> dict:
    """Global unpadded tensors of a one-process bi-encoder, for :func:`write_model_checkpoint`."""
    from mwb.core.checkpoint.shards import VOCAB_PARAM

    out = {}
    for name, p in model.named_parameters():
        t = p.detach().cpu()
        if VOCAB_PARAM.search(name):
            t = t[: model.vocab_size]
        out[name] = t.contiguous()
    return out


def write_config_file(rcfg: RetrievalConfig, directory: str) -> str:
    """``directory/biencoder.json`` (the file checkpoints carry as ``biencoder/biencoder.json``)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CONFIG_NAME)
    with open(path, "w") as f:
        f.write(rcfg.to_json() + "\n")
    return path


def with_model(cfg: RunConfig, source: EncoderSource) -> RunConfig:
    """``cfg`` with the model section of ``source`` (the architecture must match the weights)."""
    return update(cfg, {"model": dataclasses.asdict(source.cfg.model)})
