"""T5 pretraining: span corruption, from Megatron-style samples.

A sample is ``{"enc_tokens", "dec_tokens", "labels", "loss_mask", "enc_padding_mask", "dec_padding_mask"}``:
the corrupted input, the decoder input (``[bos] + target``), the target shifted by one (``target + [eos]``)
and masks. The loss is the token-weighted mean over every decoder label of the global batch (like GPT;
Megatron's T5 averages per micro-batch, which differs only when micro-batches hold different numbers of
target tokens). Pipeline parallelism is not supported for T5.
"""
from __future__ import annotations

from mwb.core.parallel.dims import LayoutError
from mwb.core.training.spec import ModelSpec


class T5Spec(ModelSpec):
    arch = "t5"

    def build_chunk(self, state, stage, device, dtype):
        if state.pp_size > 1:
            raise LayoutError("T5 does not support pipeline parallelism yet: use --pp 1")
        return super().build_chunk(state, stage, device, dtype)

    def forward(self, model, batch, hidden=None):
        return model(enc_tokens=batch["enc_tokens"], dec_tokens=batch["dec_tokens"], labels=batch["labels"],
                     loss_mask=batch.get("loss_mask"), enc_padding_mask=batch.get("enc_padding_mask"),
                     dec_padding_mask=batch.get("dec_padding_mask"))

    def tokens_in(self, batch):
        return batch["enc_tokens"].numel() + batch["dec_tokens"].numel()
