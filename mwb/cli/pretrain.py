"""``mwb pretrain gpt|bert|t5``: the main job."""
from __future__ import annotations

import os

import click

from .options import build_config, default_out, training_options

DATA_HELP = """
Data: with no --data, the bundled public-domain corpus (mwb/data/corpus) is tokenized on first use (with
--tokenizer when given) into the cache ($MWB_CACHE, default ~/.cache/mwb) and reused afterwards. --data takes Megatron-style prefixes with
optional weights: `--data P` or `--data 0.3 P1 0.7 P2` (each P names P.bin/P.idx from `mwb preprocess`),
with --tokenizer. `--data synthetic` trains on a deterministic arithmetic token stream (no files; tests).
"""


def _command(arch: str, preset: str):
    @click.command(name=arch, help=f"Pretrain {arch.upper()} (default preset {preset}).\n" + DATA_HELP)
    @training_options
    @click.option("--data", "data_first", default=None, metavar="[W1] P1 [W2 P2 ...]",
                  help="Megatron-style weighted data prefixes.")
    @click.argument("data_rest", nargs=-1, metavar="")
    def cmd(data_first, data_rest, **kw):
        from mwb.pretraining.run import pretrain

        if data_rest and data_first is None:
            raise click.UsageError(f"unexpected arguments {' '.join(data_rest)}")
        data = [data_first, *data_rest] if data_first is not None else None
        out = kw.get("out") or default_out(f"pretrain-{arch}")
        base = None
        saved = os.path.join(out, "config.yaml")
        if kw.get("resume") and os.path.exists(saved):
            base = _saved_config(saved)
        cfg = build_config(preset, kw, data=data, base=base)
        if cfg.model.arch != arch:
            raise click.UsageError(f"the config describes a '{cfg.model.arch}' model, not '{arch}'")
        pretrain(cfg, out, kw.get("nproc"), kw.get("resume", False))
    return cmd


def _saved_config(path: str):
    """A run's saved config.yaml as the base for --resume. The parallel layout is not taken from it: it
    belongs to this launch (checkpoints reshard), so `--resume --nproc 1` continues a TP2×PP2 run on one
    process unless --tp/--pp/... are given again."""
    import yaml
    from mwb.core.config import RunConfig, update
    with open(path) as f:
        tree = yaml.safe_load(f) or {}
    tree.pop("derived", None)
    tree.pop("parallel", None)
    return update(RunConfig(), tree)


@click.group(help="Pretrain a model on Megatron-format indexed data.")
def pretrain():
    pass


pretrain.add_command(_command("gpt", "gpt-tiny"))
pretrain.add_command(_command("bert", "bert-tiny"))
pretrain.add_command(_command("t5", "t5-tiny"))

from .retriever_training import ict, mss  # noqa: E402  (bi-encoder ICT / MSS pretraining, mwb/retrieval)

pretrain.add_command(ict)
pretrain.add_command(mss)
