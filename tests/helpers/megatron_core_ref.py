"""Reference megatron-core models on CPU: ``python -m tests.helpers.megatron_core_ref SPEC.json OUT.pt``.

Runs in its own process (megatron-core wants a process group and its parallel state): builds, for every
config in SPEC.json, megatron-core's ``GPTModel`` with ``get_gpt_layer_local_spec()`` (or, for a spec with
``"arch": "bert"``, its ``BertModel`` with ``bert_layer_local_spec``, tied head, tokentypes and binary head;
for ``"arch": "t5"`` its ``T5Model`` with the local encoder/decoder specs, learned positions, and logits for
fixed encoder and decoder tokens, no padding)
and ``TransformerConfig(use_cpu_initialization=True)`` at TP 1 under a one-rank gloo group, and saves its
``state_dict()`` (what Megatron-LM writes with ``--ckpt-format torch``) and its logits for fixed tokens (BERT:
MLM logits and binary logits for fixed tokens, tokentypes and a padding mask whose second row ends in padding).
A spec with ``save_dist`` also saves the model with megatron-core's ``dist_checkpointing.save`` in Megatron-LM's
trainer layout (``release/`` with ``args``, ``checkpoint_version`` and the model's sharded state dict: the
``torch_dist`` format); one with ``load_dist`` instead loads a fresh model from that ``torch_dist`` directory
with ``dist_checkpointing.load`` (a checkpoint mwb wrote) and reports its logits.

Three CUDA assumptions are patched: ``torch.cuda.current_device`` returns ``"cpu"`` (its global memory
buffer; ``torch.cuda.synchronize`` a no-op for the checkpoint writer), the attention mask is an explicit boolean causal mask (True = hidden), and
``CudaRNGStatesTracker.fork`` is a null context.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F



def tiny_specs(vocab: int, padded_vocab: int, seeds: tuple, llama_groups: int) -> dict:
    """The two tiny architectures the Megatron/NeMo reader tests build in megatron-core: GPT-2-like (learned
    positions, LayerNorm, gelu, tied) and Llama-like (RoPE, RMSNorm, SwiGLU, GQA, untied, no bias)."""
    return {
        "gpt2like": {"num_layers": 2, "hidden_size": 32, "heads": 4, "groups": 4, "ffn": 64, "norm": "LayerNorm",
                     "swiglu": False, "bias": True, "pos": "learned_absolute", "tied": True, "max_pos": 64,
                     "vocab": vocab, "padded_vocab": padded_vocab, "seed": seeds[0]},
        "llamalike": {"num_layers": 2, "hidden_size": 32, "heads": 8, "groups": llama_groups, "ffn": 48,
                      "norm": "RMSNorm", "swiglu": True, "bias": False, "pos": "rope", "tied": False, "max_pos": 64,
                      "vocab": vocab, "padded_vocab": padded_vocab, "seed": seeds[1]},
    }

def bert_spec(vocab: int, padded_vocab: int, seed: int) -> dict:
    """A tiny Megatron BERT (learned positions, LayerNorm, gelu, tied MLM head, 2 tokentypes, binary head)."""
    return {"arch": "bert", "num_layers": 2, "hidden_size": 32, "heads": 4, "groups": 4, "ffn": 64,
            "norm": "LayerNorm", "swiglu": False, "bias": True, "pos": "learned_absolute", "tied": True,
            "max_pos": 64, "vocab": vocab, "padded_vocab": padded_vocab, "seed": seed, "tokentypes": 2}


def t5_spec(vocab: int, padded_vocab: int, seed: int, tied: bool, final_norm: bool) -> dict:
    """A tiny megatron-core T5 (learned positions, LayerNorm, gelu, 2 + 2 layers), its head tied or not and
    its stacks with final norms (as with Transformer Engine) or without (the local spec's block)."""
    return {"arch": "t5", "num_layers": 2, "hidden_size": 32, "heads": 4, "groups": 4, "ffn": 64,
            "norm": "LayerNorm", "swiglu": False, "bias": True, "pos": "learned_absolute", "tied": tied,
            "max_pos": 32, "vocab": vocab, "padded_vocab": padded_vocab, "seed": seed, "final_norm": final_norm}


def _build_t5(cfg, spec: dict):
    from megatron.core.models.T5 import T5Model, t5_spec as spec_lib
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
    n = spec["num_layers"]
    if spec["final_norm"]:
        enc = TransformerBlockSubmodules([spec_lib.encoder_model_with_local_spec()] * n, layer_norm=WrappedTorchNorm)
        dec = TransformerBlockSubmodules([spec_lib.decoder_model_with_local_spec()] * n, layer_norm=WrappedTorchNorm)
    else:
        enc, dec = spec_lib.get_t5_encoder_with_local_block_spec(n), spec_lib.get_t5_decoder_with_local_block_spec(n)
    return T5Model(cfg, cfg, enc, dec, vocab_size=spec["padded_vocab"], max_sequence_length=spec["max_pos"],
                   share_embeddings_and_output_weights=spec["tied"], position_embedding_type=spec["pos"]).eval()


def build(spec: dict):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    swiglu = spec["swiglu"]
    cfg = TransformerConfig(num_layers=spec["num_layers"], hidden_size=spec["hidden_size"],
                            num_attention_heads=spec["heads"], num_query_groups=spec["groups"],
                            ffn_hidden_size=spec["ffn"], use_cpu_initialization=True, gated_linear_unit=swiglu,
                            activation_func=F.silu if swiglu else F.gelu, normalization=spec["norm"],
                            add_bias_linear=spec["bias"], hidden_dropout=0.0, attention_dropout=0.0,
                            bias_activation_fusion=False, masked_softmax_fusion=False,
                            gradient_accumulation_fusion=False, persist_layer_norm=False, apply_rope_fusion=False,
                            init_method_std=0.2)
    if spec.get("arch") == "t5":
        return _build_t5(cfg, spec)
    if spec.get("arch") == "bert":
        from megatron.core.models.bert.bert_layer_specs import bert_layer_local_spec
        from megatron.core.models.bert.bert_model import BertModel
        return BertModel(cfg, num_tokentypes=spec["tokentypes"], transformer_layer_spec=bert_layer_local_spec,
                         vocab_size=spec["padded_vocab"], max_sequence_length=spec["max_pos"],
                         share_embeddings_and_output_weights=True, add_binary_head=True).eval()
    return GPTModel(cfg, get_gpt_layer_local_spec(normalization=spec["norm"]), vocab_size=spec["padded_vocab"],
                    max_sequence_length=spec["max_pos"], position_embedding_type=spec["pos"],
                    share_embeddings_and_output_weights=spec["tied"]).eval()



def run_reference(specs: dict, d) -> dict:
    """This module run as its own process on ``specs`` (written to ``d/spec.json``): what :func:`main` saved
    in ``d/ref.pt`` (each spec's state dict and logits)."""
    spec, out = d / "spec.json", d / "ref.pt"
    spec.write_text(json.dumps(specs))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-m", "tests.helpers.megatron_core_ref", str(spec), str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return torch.load(out, weights_only=False)


def main(spec_file: str, out_file: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None
    tensor_parallel.random.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()
    parallel_state.initialize_model_parallel(1, 1)
    with open(spec_file) as f:
        specs = json.load(f)
    out = {}
    for name, spec in specs.items():
        torch.manual_seed(spec.get("seed", 0) + (1000 if spec.get("load_dist") else 0))  # loading: other init
        try:
            model_parallel_cuda_manual_seed(spec.get("seed", 0))
        except Exception:
            pass
        model = build(spec)
        if spec.get("load_dist"):
            from megatron.core import dist_checkpointing
            loaded = dist_checkpointing.load(model.sharded_state_dict(), spec["load_dist"])
            model.load_state_dict(loaded, strict=False)  # _extra_state: None either way
        with torch.no_grad():
            # random norm weights too, so a norm mapped to the wrong place cannot go unseen
            # (BERT: every bias too, megatron-core zeroes them, and lm_head.layer_norm)
            biases = spec.get("arch") in ("bert", "t5")  # T5: its biases (the tied head's too) are zeros as well
            for k, p in model.named_parameters():
                if ("layernorm" in k or biases and ("layer_norm" in k or k.endswith("bias"))) \
                        and not spec.get("load_dist"):
                    p.add_(torch.randn_like(p) * 0.1)
        g = torch.Generator().manual_seed(7)
        tokens = torch.randint(0, spec["vocab"], (2, 9), generator=g)
        s = tokens.size(1)
        extra_out = {}
        with torch.no_grad():
            if spec.get("arch") == "t5":
                dec_tokens = torch.randint(0, spec["vocab"], (2, 7), generator=g)
                logits = model(tokens, dec_tokens, torch.zeros(2, 1, s, s, dtype=torch.bool),
                               torch.ones(2, 1, 7, 7, dtype=torch.bool).triu(1),
                               torch.zeros(2, 1, 7, s, dtype=torch.bool))
                extra_out = {"dec_tokens": dec_tokens}
            elif spec.get("arch") == "bert":
                types = torch.randint(0, spec["tokentypes"], (2, s), generator=g)
                padding = torch.ones(2, s, dtype=torch.long)
                padding[1, 6:] = 0
                logits, binary = model(tokens, padding, tokentype_ids=types)
                extra_out = {"types": types, "padding": padding, "binary_logits": binary}
            else:
                mask = torch.ones(1, 1, s, s, dtype=torch.bool).triu(1)
                logits = model(tokens, torch.arange(s)[None].expand(2, s), mask)
        state = {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
        extra = [k for k, v in model.state_dict().items() if not isinstance(v, torch.Tensor)]
        if spec.get("save_dist"):
            from megatron.core import dist_checkpointing
            from tests.helpers.megatron_core_ckpt import core_args
            d = os.path.join(spec["save_dist"], "release")
            os.makedirs(d, exist_ok=True)
            dist_checkpointing.save({"args": core_args(spec, 1, 1), "checkpoint_version": 3.0, "iteration": 0,
                                     "model": model.sharded_state_dict()}, d)
            with open(os.path.join(spec["save_dist"], "latest_checkpointed_iteration.txt"), "w") as f:
                f.write("release")
        out[name] = {"state": state, "extra_state_keys": extra, "tokens": tokens, "logits": logits, **extra_out}
    torch.save(out, out_file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
