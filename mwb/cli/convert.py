"""``mwb convert SRC DST``: Hugging Face ↔ mwb checkpoints (logic in :mod:`mwb.core.convert`)."""
from __future__ import annotations

import click

HELP = """Convert between Hugging Face and mwb checkpoints; the direction follows from SRC.

\b
SRC a Hugging Face model directory (config.json + safetensors/bin weights):
    DST becomes an mwb checkpoint directory (load it with --checkpoint DST, or fine-tune from it).
SRC an mwb run directory, checkpoints/ directory, step_N directory or consolidated .safetensors:
    DST becomes a Hugging Face directory (config.json + model.safetensors) for from_pretrained.
SRC a .gguf file (llama.cpp; Llama family, any quantisation the gguf package reads):
    DST becomes an mwb checkpoint, dequantised to float32, with the tokenizer and chat template.

Families: GPT-2 (GPT2LMHeadModel), Llama/Mistral (LlamaForCausalLM), BERT (BertModel, BertForMaskedLM,
BertForPreTraining; mwb's post-norm BERT), T5 (T5ForConditionalGeneration; mwb's T5 with relative
positions). Tokenizer files are copied when present.
"""


@click.command(help=HELP)
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--force", is_flag=True, default=False, help="Replace DST if it exists and is not empty.")
def convert(src, dst, force):
    from mwb.core.convert import convert as run
    from mwb.core.named_models import local_checkpoint

    direction, out, family = run(local_checkpoint(src), dst, overwrite=force)
    what = "Hugging Face model" if direction == "mwb-to-hf" else "mwb checkpoint"
    click.echo(f"mwb: converted {family} {src} → {what} {out}")
