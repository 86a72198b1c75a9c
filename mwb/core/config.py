"""Run configuration: one frozen dataclass per concern, YAML files and ``--set dotted.key=value``.

There is no global ``args``: a :class:`RunConfig` is built once (preset → YAML → ``--set`` → CLI flags) and
passed explicitly. Unknown keys and values of the wrong type are rejected with an error naming the key,
because a silently ignored typo in a 1,000-GPU job is the most expensive bug there is.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional, Union

import yaml


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names the key."""


@dataclass(frozen=True)
class ModelConfig:
    arch: str = "gpt"  # gpt | bert | t5
    num_layers: int = 4
    hidden_size: int = 128
    num_attention_heads: int = 4
    num_query_groups: Optional[int] = None  # GQA/MQA; None = num_attention_heads
    ffn_hidden_size: Optional[int] = None  # None = 4 * hidden (or 8/3 * hidden rounded for swiglu)
    kv_channels: Optional[int] = None  # head dim; None = hidden / heads
    vocab_size: Optional[int] = None  # None = taken from the tokenizer
    max_position_embeddings: int = 1024
    normalization: str = "layernorm"  # layernorm | rmsnorm
    norm_eps: float = 1e-5
    activation: str = "gelu"  # gelu | gelu_tanh (GPT-2 gelu_new) | swiglu | relu | geglu_tanh (T5 v1.1)
    position_embedding: str = "learned"  # learned | rope | relative (t5)
    rope_theta: float = 10000.0
    dropout: float = 0.1
    attention_dropout: Optional[float] = None  # None = dropout
    bias: bool = True
    tie_embeddings: bool = True
    init_std: float = 0.02
    make_vocab_size_divisible_by: int = 128
    # encoder-decoder (t5) and bert extras
    num_decoder_layers: Optional[int] = None
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    t5_scale_decoder_output: Optional[bool] = None  # decoder output × hidden^-0.5 before the head; None = tied
    t5_head_bias: bool = False  # a vocab bias on the T5 head (megatron-core's tied lm_head.output_layer.bias)
    t5_final_norm: bool = True  # False: no encoder/decoder final norm (megatron-core's local spec without TE)
    num_tokentypes: int = 2
    bert_binary_head: bool = True
    bert_post_norm: bool = False  # Hugging Face BERT layout (post-norm, embedding norm); default Megatron pre-norm
    bert_lm_head: bool = True  # False: no masked-LM head (an imported plain BertModel): an encoder, not pretrainable
    bert_pooler: bool = False  # a pooler without the binary head (a Hugging Face BertModel's); the binary head has one
    # mixture of experts
    num_experts: int = 0
    moe_top_k: int = 2
    moe_layer_freq: int = 1
    moe_ffn_hidden_size: Optional[int] = None
    moe_router_score: str = "softmax"  # softmax | sigmoid
    moe_router_pre_softmax: bool = False  # softmax before top-k (True) or over the top-k logits (False)
    moe_aux_loss_coeff: float = 1e-2
    moe_z_loss_coeff: float = 0.0
    moe_capacity_factor: Optional[float] = None  # None = dropless
    moe_shared_expert_ffn_hidden_size: Optional[int] = None
    moe_dispatcher: str = "alltoall"  # alltoall | allgather

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        if self.ffn_hidden_size:
            return self.ffn_hidden_size
        if self.activation == "swiglu":
            return int(8 * self.hidden_size / 3 + 63) // 64 * 64
        return 4 * self.hidden_size

    @property
    def attn_dropout(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def stage_layers(self) -> int:
        """Layers the pipeline splits over its stages: T5's encoder layers, then its decoder layers, form
        one sequence (decoder layer ids continue after the encoder's)."""
        if self.arch == "t5":
            return self.num_layers + (self.num_decoder_layers or self.num_layers)
        return self.num_layers


@dataclass(frozen=True)
class ParallelConfig:
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # virtual pipeline stages per pp rank (interleaved 1F1B when > 1)
    cp: int = 1
    ep: int = 1
    sp: bool = False
    distributed_optimizer: bool = False
    fsdp: bool = False  # FSDP2: parameters, gradients and optimizer state sharded over DP (parallel/fsdp.py)
    order: str = "tp-cp-ep-dp-pp"
    pipeline_layers: Optional[list] = None  # explicit layers per (virtual) stage; None = even split
    recompute: str = "none"  # none | selective | full
    recompute_method: str = "uniform"  # uniform | block
    recompute_num_layers: int = 1
    dp_bucket_mb: float = 40.0
    timeout_s: float = 600.0  # collective timeout; a dead rank makes the others fail after this


@dataclass(frozen=True)
class OptimConfig:
    name: str = "adamw"  # adamw | adam | sgd
    lr: float = 3e-4
    min_lr: float = 3e-5
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    momentum: float = 0.9
    clip_grad: float = 1.0
    lr_schedule: str = "cosine"  # cosine | linear | constant | wsd
    warmup_steps: int = 0
    decay_steps: Optional[int] = None  # None = train.steps
    wsd_decay_fraction: float = 0.1  # warmup-stable-decay: last fraction of steps decays


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200
    micro_batch_size: int = 4
    global_batch_size: int = 8
    seq_length: int = 128
    seed: int = 1234
    precision: str = "fp32"  # fp32 | bf16 | fp16 | fp8 (bf16 weights, fp8 GEMMs inside the blocks)
    initial_loss_scale: float = 2.0**16
    min_loss_scale: float = 1.0
    loss_scale_window: int = 1000
    hysteresis: int = 2
    eval_interval: int = 50
    eval_steps: int = 4
    save_interval: int = 0  # 0 = only at the end
    keep_last: int = 0  # 0 = keep all
    # write checkpoints in a background thread from CPU copies (mwb.core.checkpoint.async_save): training goes
    # on; the next save and the end of the run wait for it; ``latest`` moves only once it is whole
    async_save: bool = False
    out: Optional[str] = None
    compile: bool = False  # torch.compile each transformer block (opt-in; first steps pay the compile)
    # Megatron's --rampup-batch-size [start, increment, samples]: the global batch grows from start to
    # global_batch_size by increment every samples / ((global_batch_size - start) / increment) samples
    rampup_batch_size: Optional[list] = None
    # generative fine-tuning (--pack): several samples share a row of seq_length + 1 tokens, each attending
    # only to itself, positions restarting per sample (mwb.core.data.packing)
    pack: bool = False


@dataclass(frozen=True)
class DataConfig:
    data: Optional[list] = None  # Megatron-style [w1, prefix1, w2, prefix2, ...] or [prefix]
    tokenizer: Optional[str] = None
    split: str = "949,50,1"
    cache_dir: Optional[str] = None
    num_workers: int = 0
    mask_prob: float = 0.15  # BERT: share of tokens predicted (Megatron's --mask-prob)


@dataclass(frozen=True)
class LoggingConfig:
    log_interval: int = 10  # plain progress lines when stderr is not a terminal
    tensorboard: bool = True
    progress: bool = True
    plot: bool = True
    peak_tflops: Optional[float] = None  # per-device peak for MFU; None = measured/unknown
    log: list = field(default_factory=list)  # experiment trackers (--log): wandb, mlflow, tensorboard (tracking.py)


@dataclass(frozen=True)
class EnergyConfig:
    """Declared power for the energy estimate where no counter (RAPL, NVML) measures it, and the grid's
    carbon intensity: 475 gCO2e/kWh is the world average of the IEA's Global Energy & CO2 Status Report
    2019 (mwb.core.training.energy)."""
    cpu_tdp_w: float = 65.0  # the CPU package(s) this machine shows, at full load
    gpu_tdp_w: float = 400.0  # per GPU (A100 SXM)
    grid_gco2_per_kwh: float = 475.0


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters (Hu et al. 2021) on the blocks' linear layers; ``rank`` 0 means off.

    ``targets`` names Megatron's four linear layers: ``qkv`` (q/k/v projections), ``proj`` (attention
    output), ``fc1`` (MLP up, and gate for gated MLPs), ``fc2`` (MLP down). The adapter output is
    ``alpha / rank · B·A·x``; ``alpha`` None means ``rank`` (scale 1). The base weights are frozen."""
    rank: int = 0
    alpha: Optional[float] = None
    dropout: float = 0.0
    targets: str = "qkv,proj,fc1,fc2"

    @property
    def scale(self) -> float:
        return (self.alpha if self.alpha is not None else float(self.rank)) / max(self.rank, 1)


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)


# ----------------------------------------------------------------------------------------------- overrides


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _coerce(key: str, value: Any, tp: Any) -> Any:
    base, optional = _strip_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"config key '{key}' cannot be null")
    if base is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' expects true/false, got {value!r}")
    if base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"config key '{key}' expects an integer, got {value!r}")
    if base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"config key '{key}' expects a number, got {value!r}")
    if base is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"config key '{key}' expects a string, got {value!r}")
    if base is list or typing.get_origin(base) is list:
        if isinstance(value, (list, tuple)):
            return list(value)
        return [value]
    return value


def _section_types(section: Any) -> dict[str, Any]:
    return typing.get_type_hints(type(section))


def update(cfg: RunConfig, tree: dict, where: str = "") -> RunConfig:
    """Return ``cfg`` with the nested mapping ``tree`` applied, checking every key and type."""
    if not isinstance(tree, dict):
        raise ConfigError(f"config {where or 'file'} must be a mapping of sections, got {type(tree).__name__}")
    sections = {f.name for f in fields(cfg)}
    changes = {}
    for name, values in tree.items():
        if name not in sections:
            raise ConfigError(f"unknown config section '{name}' (known: {', '.join(sorted(sections))})")
        section = getattr(cfg, name)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"config section '{name}' must be a mapping")
        hints = _section_types(section)
        known = {f.name for f in fields(section)}
        kw = {}
        for key, value in values.items():
            if key not in known:
                close = [k for k in known if k.startswith(str(key)[:4])]
                hint = f"; did you mean {', '.join(sorted(close))}?" if close else ""
                raise ConfigError(f"unknown config key '{name}.{key}'{hint}")
            kw[key] = _coerce(f"{name}.{key}", value, hints[key])
        changes[name] = replace(section, **kw)
    return replace(cfg, **changes)


def parse_set(item: str) -> dict:
    """``'model.num_layers=2'`` → ``{'model': {'num_layers': 2}}`` (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"--set expects KEY=VALUE, got '{item}'")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--set key '{key}' must be SECTION.FIELD, e.g. model.num_layers")
    try:
        value = yaml.safe_load(raw) if raw.strip() != "" else None
    except yaml.YAMLError:
        value = raw
    return {parts[0]: {parts[1]: value}}


def apply_sets(cfg: RunConfig, items: list[str] | tuple[str, ...]) -> RunConfig:
    for item in items:
        cfg = update(cfg, parse_set(item))
    return cfg


def load_yaml(cfg: RunConfig, path: str) -> RunConfig:
    try:
        with open(path) as f:
            tree = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    return update(cfg, tree, where=path)


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: RunConfig, path: str, extra: Optional[dict] = None) -> None:
    tree = to_dict(cfg)
    if extra:
        tree.update(extra)
    with open(path, "w") as f:
        yaml.safe_dump(tree, f, sort_keys=False)
