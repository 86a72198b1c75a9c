"""``mwb convert SRC DST``: Hugging Face ↔ mwb checkpoints (logic in :mod:`mwb.core.convert`)."""
from __future__ import annotations

import click

HELP = """Convert between Hugging Face and mwb checkpoints; the direction follows from SRC.

\b
SRC a Hugging Face model directory (config.json + safetensors/bin weights):
    DST becomes an mwb checkpoint directory (load it with --checkpoint DST, or fine-tune from it).
SRC an mwb run directory, checkpoints/ directory, step_N directory or consolidated .safetensors:
    DST becomes a Hugging Face directory (config.json + model.safetensors) for from_pretrained.
SRC a Megatron-LM legacy checkpoint (a --save directory with latest_checkpointed_iteration.txt, or an
    iter_NNNNNNN / release directory of mp_rank_TT[_PPP]/model_optim_rng.pt; GPT or BERT, any TP/PP):
    DST becomes an mwb checkpoint, shards merged, with the vocabulary files found beside it.
SRC a .gguf file (llama.cpp; Llama family, any quantisation the gguf package reads):
    DST becomes an mwb checkpoint, dequantised to float32, with the tokenizer and chat template.

SRC a LoRA run (--lora): with --merge, DST is a Hugging Face model with the adapters merged into the base;
    with --peft, DST is a PEFT adapter directory (adapter_config.json, adapter_model.safetensors) for
    PeftModel.from_pretrained on the base's own export (`mwb convert BASE OUT`).

--to megatron: SRC an mwb GPT, BERT or T5 checkpoint; DST becomes a megatron-core torch_dist save directory (release/,
    args in common.pt) that Megatron-LM loads with --load DST --use-checkpoint-args.

Families: GPT-2 (GPT2LMHeadModel), Llama/Mistral (LlamaForCausalLM), BERT (BertModel, BertForMaskedLM,
BertForPreTraining; mwb's post-norm BERT), T5 (T5ForConditionalGeneration; mwb's T5 with relative
positions). Tokenizer files are copied when present.
"""


@click.command(help=HELP)
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--force", is_flag=True, default=False, help="Replace DST if it exists and is not empty.")
@click.option("--merge", is_flag=True, default=False, help="A LoRA run as a full Hugging Face model.")
@click.option("--peft", is_flag=True, default=False, help="A LoRA run as a PEFT adapter directory.")
@click.option("--to", "to", type=click.Choice(["megatron"]), default=None,
              help="megatron: write an mwb GPT/BERT/T5 as a megatron-core torch_dist checkpoint "
                   "(Megatron-LM: --load DST "
                   "--use-checkpoint-args).")
def convert(src, dst, force, merge, peft, to):
    from mwb.core.compose import export_lora
    from mwb.core.convert import convert as run
    from mwb.core.convert import is_megatron, is_nemo
    from mwb.core.named_models import local_checkpoint

    if merge and peft:
        raise click.UsageError("--merge and --peft exclude each other")
    if to == "megatron":
        from mwb.core.convert import mwb_to_megatron
        out, family = mwb_to_megatron(local_checkpoint(src), dst, overwrite=force)
        click.echo(f"mwb: converted {src} → {family} torch_dist checkpoint {out}")
        return
    if merge or peft:
        out, family = export_lora(src, dst, peft=peft, overwrite=force)
        what = "PEFT adapter directory" if peft else "Hugging Face model (adapters merged)"
        click.echo(f"mwb: converted {family} LoRA run {src} → {what} {out}")
        return
    # a Megatron or NeMo SRC converts to mwb here (local_checkpoint would turn it into a cached mwb checkpoint,
    # which convert would then export to Hugging Face)
    source = src if is_megatron(src) or is_nemo(src) else local_checkpoint(src)
    direction, out, family = run(source, dst, overwrite=force)
    what = "Hugging Face model" if direction == "mwb-to-hf" else "mwb checkpoint"
    click.echo(f"mwb: converted {family} {src} → {what} {out}")
