"""``mwb plan``: parameters, FLOPs, memory per GPU and the parallel layouts that fit, for a model on a cluster.

The model comes from the same preset → ``--config`` → ``--set`` chain as the training commands, so a plan
describes exactly the model ``mwb pretrain`` would build. With neither ``--preset`` nor ``--config`` it
plans gpt-1.3b at sequence 2,048 and global batch 512 (GPT-3's setting for that size): a model worth
planning on the default 8 GPUs, unlike the CPU-sized gpt-tiny. All the arithmetic is in ``mwb.core.plan``.
"""
from __future__ import annotations

import json

import click

DEFAULT_PRESET = "gpt-1.3b"
DEFAULT_WORKLOAD = {"train": {"seq_length": 2048, "global_batch_size": 512}}


# The --hardware choices, spelled out so that ``mwb plan --help`` imports nothing; a test keeps them equal
# to mwb.core.plan.layout.HARDWARE.
HARDWARE_NAMES = ["a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb"]


@click.command("plan")
@click.option("--preset", help="named model preset (e.g. gpt-1t); default gpt-1.3b when no --config")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="config YAML file")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override a config field, repeatable")
@click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--hardware", type=click.Choice(HARDWARE_NAMES),
              default="a100-80gb", show_default=True, help="defaults for the next five flags")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node [8]")
@click.option("--gpu-memory", type=click.FloatRange(min=0, min_open=True), help="GiB per GPU [80 on A100-80GB]")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), help="dense 16-bit peak [312 on A100]")
@click.option("--intra-node-bw", type=click.FloatRange(min=0, min_open=True),
              help="GB/s per GPU inside a node (NVLink) [230 on A100]")
@click.option("--inter-node-bw", type=click.FloatRange(min=0, min_open=True),
              help="GB/s per GPU between nodes (InfiniBand) [25 on A100]")
@click.option("--efficiency", type=click.FloatRange(min=0, max=1, min_open=True), default=0.5, show_default=True,
              help="fraction of peak the matmuls reach")
@click.option("--memory-reserve", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="GiB per GPU kept free (CUDA context, NCCL buffers, fragmentation)")
@click.option("--global-batch-size", type=click.IntRange(min=1), help="sequences per iteration [config]")
@click.option("--seq-length", type=click.IntRange(min=1), help="tokens per sequence [config]")
@click.option("--micro-batch-size", type=click.IntRange(min=1), help="fix the micro-batch size [search 1,2,4,8]")
@click.option("--tp", type=click.IntRange(min=1), help="fix tensor parallel size [search]")
@click.option("--pp", type=click.IntRange(min=1), help="fix pipeline parallel size [search]")
@click.option("--vpp", type=click.IntRange(min=1), help="fix virtual pipeline stages per rank [search]")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True, help="expert parallel size")
@click.option("--sp/--no-sp", default=None, help="fix sequence parallelism on/off [search]")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), help="fix recompute [search]")
@click.option("--distributed-optimizer/--no-distributed-optimizer", default=None,
              help="fix optimizer sharding on/off [search]")
@click.option("--fsdp", is_flag=True, help="plan FSDP2 layouts (states sharded over dp; pp 1) [off]")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]),
              help="[the config's train.precision, bf16 where that is the CPU default fp32]")
@click.option("--flash-attention", is_flag=True, help="fused attention: no s×s scores stored")
@click.option("--train-tokens", type=click.FloatRange(min=0, min_open=True),
              help="tokens the whole run trains on, e.g. 270e9 [train.steps × batch × seq]")
@click.option("--rampup-batch-size", type=int, nargs=3, default=None, metavar="START INCREMENT SAMPLES",
              help="Megatron's batch-size ramp-up, counted in time and energy [train.rampup_batch_size]")
@click.option("--device-power", type=click.FloatRange(min=0, min_open=True),
              help="W per GPU for the energy estimate [board TDP: 400 on A100, 700 on H100/H200]")
@click.option("--pue", type=click.FloatRange(min=1.0), default=1.0, show_default=True,
              help="datacentre power usage effectiveness multiplying the GPUs' energy")
@click.option("--grid-gco2", type=click.FloatRange(min=0),
              help="grid carbon intensity, gCO2e/kWh [energy.grid_gco2_per_kwh: 475, IEA world average]")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="layouts to list")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object instead of text")
def plan(preset, config_file, sets, gpus, hardware, gpus_per_node, gpu_memory, peak_tflops, intra_node_bw,
         inter_node_bw, efficiency, memory_reserve, global_batch_size, seq_length, micro_batch_size, tp, pp, vpp,
         ep, sp, recompute, distributed_optimizer, fsdp, precision, flash_attention, train_tokens, rampup_batch_size,
         device_power, pue, grid_gco2, top, as_json):
    """Memory, FLOPs and parallel-layout advice for a model on a cluster (formulas in docs/plan.md)."""
    from mwb.core.config import ConfigError, RunConfig, apply_sets, load_yaml, parse_set, update
    from mwb.core.plan import HARDWARE, Constraints, Workload, plan as run_plan
    from mwb.core.plan.report import energy_estimate, render, render_energy, to_dict
    from mwb.core.presets import apply_preset

    cfg = RunConfig()
    name = preset or ("" if config_file else DEFAULT_PRESET)
    if name:
        cfg = apply_preset(cfg, name)
    if not preset and not config_file:
        cfg = update(cfg, DEFAULT_WORKLOAD)
    if config_file:
        cfg = load_yaml(cfg, config_file)
    cfg = apply_sets(cfg, sets)
    given = {(sec, f) for item in sets for sec, fields in parse_set(item).items() for f in fields}

    def flag_or_config(flag, key: str, value):
        """``--set`` over the flag over the config (the precedence of every command: options.build_config)."""
        return value if tuple(key.split(".")) in given or flag is None else flag

    seq = flag_or_config(seq_length, "train.seq_length", None) or cfg.train.seq_length
    m = cfg.model
    if m.position_embedding == "learned" and seq > m.max_position_embeddings:
        raise ConfigError(f"--seq-length {seq} exceeds model.max_position_embeddings {m.max_position_embeddings}; "
                          f"raise it with --set model.max_position_embeddings={seq}")
    precision = flag_or_config(precision, "train.precision", None)
    if precision is None:  # fp8 keeps bf16 weights and fp32 masters: bf16's memory
        precision = cfg.train.precision if cfg.train.precision not in ("fp32", "fp8") else "bf16"
    hw = HARDWARE[hardware].with_(gpus_per_node=gpus_per_node, memory_gib=gpu_memory, peak_tflops=peak_tflops,
                                  intra_node_bw=intra_node_bw, inter_node_bw=inter_node_bw,
                                  efficiency=efficiency, memory_reserve_gib=memory_reserve, power_w=device_power)
    if hw.memory_reserve_gib >= hw.memory_gib:
        raise ConfigError(f"--memory-reserve {hw.memory_reserve_gib:g} GiB leaves nothing of --gpu-memory "
                          f"{hw.memory_gib:g} GiB")
    from mwb.core.training.rampup import BatchRampup
    gbs = flag_or_config(global_batch_size, "train.global_batch_size", None) or cfg.train.global_batch_size
    ramp = BatchRampup.from_config(flag_or_config(list(rampup_batch_size) if rampup_batch_size else None,
                                                  "train.rampup_batch_size", cfg.train.rampup_batch_size), gbs)
    workload = Workload(gpus, gbs, precision, (ramp.start, ramp.increment, ramp.samples) if ramp else None)
    constraints = Constraints(tp=tp, pp=pp, vpp=vpp, ep=ep, sp=sp, recompute=recompute,
                              distributed_optimizer=distributed_optimizer, fsdp=fsdp, micro_batch_size=micro_batch_size,
                              flash_attention=flash_attention)
    result = run_plan(m, workload, hw, constraints, seq)
    steps_samples = ramp.consumed_after(cfg.train.steps) if ramp else cfg.train.steps * workload.global_batch_size
    tokens = train_tokens or float(steps_samples) * seq
    energy = energy_estimate(result, tokens, flag_or_config(grid_gco2, "energy.grid_gco2_per_kwh",
                                                            cfg.energy.grid_gco2_per_kwh), pue)
    if as_json:
        out = to_dict(result, top)
        out["preset"] = name or None
        out["energy"] = energy
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(render(result, top, name or config_file or "") + "\n" + "\n".join(render_energy(energy, gpus)))
