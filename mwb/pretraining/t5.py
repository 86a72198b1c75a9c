"""T5 pretraining: span corruption, from Megatron-style samples.

A sample is ``{"enc_tokens", "dec_tokens", "labels", "loss_mask", "enc_padding_mask", "dec_padding_mask"}``:
the corrupted input, the decoder input (``[bos] + target``), the target shifted by one (``target + [eos]``)
and masks. The loss is the token-weighted mean over every decoder label of the global batch (like GPT;
Megatron's T5 averages per micro-batch, which differs only when micro-batches hold different numbers of
target tokens).

Pipeline parallelism: the stages split the encoder layers followed by the decoder layers
(``model.stage_layers``), and the one tensor passed between stages is the encoder hidden state and the
decoder hidden state concatenated along the sequence, ``[b, s_enc + s_dec, h]`` (each part this rank's
sequence slice under SP); see :mod:`mwb.core.models.t5`. Every stage reads the token tensors of the
micro-batch for the lengths and padding masks, so the message shape comes from the batch: the decoder
length is the dataset's, not ``train.seq_length``.
"""
from __future__ import annotations

from mwb.core.training.model_spec import ModelSpec


class T5Spec(ModelSpec):
    arch = "t5"

    def forward(self, model, batch, hidden=None):
        return model(enc_tokens=batch["enc_tokens"], dec_tokens=batch["dec_tokens"],
                     labels=batch["labels"] if model.post_process else None, loss_mask=batch.get("loss_mask"),
                     enc_padding_mask=batch.get("enc_padding_mask"),
                     dec_padding_mask=batch.get("dec_padding_mask"), hidden=hidden)

    def tokens_in(self, batch):
        return batch["enc_tokens"].numel() + batch["dec_tokens"].numel()

    def hidden_shape(self, micro_batch, seq_length, state, batch=None):
        if batch is None:
            raise ValueError("the T5 pipeline message shape needs the micro-batch (encoder and decoder lengths)")
        split = state.tp_size if state.sp else 1
        enc, dec = batch["enc_tokens"], batch["dec_tokens"]
        return (enc.size(0), enc.size(1) // split + dec.size(1) // split, self.cfg.model.hidden_size)
