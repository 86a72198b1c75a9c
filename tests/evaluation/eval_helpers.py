"""Shared test fixtures' building blocks: a tokenizer trained on the bundled samples, a tiny GPT-2-shaped
mwb model (briefly trained so LAMBADA accuracy is not trivially 0), and the same weights in
``transformers.GPT2LMHeadModel`` — the independent reference the harness's numbers are checked against."""
from __future__ import annotations

import os

import torch

from mwb.core.config import ModelConfig, RunConfig
from mwb.core.compose import build_model
from mwb.core.parallel import single_process_state
DATA_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "mwb", "tasks", "lm", "bundled")

LAMBADA = os.path.join(DATA_DIR, "lambada_sample.jsonl")
WIKI = os.path.join(DATA_DIR, "wiki_sample.tokens")


def model_config(**kw) -> ModelConfig:
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, max_position_embeddings=256, dropout=0.0,
                activation="gelu_tanh", init_std=0.05, make_vocab_size_divisible_by=64)
    base.update(kw)
    return ModelConfig(**base)


def train_tokenizer(out_dir: str) -> str:
    import shutil

    from mwb.core.tokenizers import train_tokenizer as train
    wiki_txt = os.path.join(out_dir, "wiki.txt")  # the trainer reads .txt, not WikiText's .tokens
    shutil.copy(WIKI, wiki_txt)
    return train("bpe", [LAMBADA, wiki_txt], 600, os.path.join(out_dir, "tokenizer"))


def tiny_gpt(vocab: int, state=None, seed: int = 3, **kw):
    return build_model(model_config(**kw), state or single_process_state(), vocab, seed=seed)


def memorise(model, rows: list[list[int]], steps: int = 20, lr: float = 1e-2) -> None:
    """A few full-batch Adam steps on ``rows`` so the model predicts some (~half) of their last words.

    One intra-op thread: on this project's shared 2-core machines two threads make it ~5x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _memorise(model, rows, steps, lr)
    finally:
        torch.set_num_threads(threads)


def _memorise(model, rows, steps, lr) -> None:
    torch.manual_seed(0)
    width = max(len(r) for r in rows)
    x = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    labels = torch.tensor([r[1:] + [-100] * (width - len(r)) for r in rows])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss_sum, n = model(x[:, :-1], labels=labels)
        opt.zero_grad()
        (loss_sum / n).backward()
        opt.step()
    model.eval()


def to_hf(model, vocab: int):
    """``transformers.GPT2LMHeadModel`` holding exactly the mwb model's weights (tied embeddings)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.cfg
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=c.max_position_embeddings, n_embd=c.hidden_size,
                                    n_layer=c.num_layers, n_head=c.num_attention_heads,
                                    activation_function="gelu_new" if c.activation == "gelu_tanh" else "gelu",
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                    layer_norm_epsilon=c.norm_eps, tie_word_embeddings=True, bos_token_id=0,
                                    eos_token_id=0))
    sd = {"transformer.wte.weight": model.embed.word.weight[:vocab],
          "transformer.wpe.weight": model.embed.position.weight,
          "transformer.ln_f.weight": model.final_norm.weight, "transformer.ln_f.bias": model.final_norm.bias}
    for i, layer in model.layers.items():
        p, a, m = f"transformer.h.{i}.", layer.attn, layer.mlp
        sd.update({
            p + "ln_1.weight": layer.ln1.weight, p + "ln_1.bias": layer.ln1.bias,
            p + "ln_2.weight": layer.ln2.weight, p + "ln_2.bias": layer.ln2.bias,
            # HF Conv1D stores [in, out]: the transpose of nn.Linear
            p + "attn.c_attn.weight": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).t(),
            p + "attn.c_attn.bias": torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]),
            p + "attn.c_proj.weight": a.o_proj.weight.t(), p + "attn.c_proj.bias": a.o_proj.bias,
            p + "mlp.c_fc.weight": m.up_proj.weight.t(), p + "mlp.c_fc.bias": m.up_proj.bias,
            p + "mlp.c_proj.weight": m.down_proj.weight.t(), p + "mlp.c_proj.bias": m.down_proj.bias,
        })
    missing, unexpected = hf.load_state_dict({k: v.detach().clone().contiguous() for k, v in sd.items()},
                                             strict=False)
    assert not unexpected and all("lm_head" in k or "attn.bias" in k or "masked_bias" in k for k in missing), \
        (missing, unexpected)
    return hf.eval()


def save_checkpoint(model, vocab: int, tokenizer_path: str, directory: str, seq_length: int = 64) -> str:
    """An mwb model-only checkpoint (through the checkpoint module's writer) with its tokenizer."""
    from mwb.core.checkpoint import write_model_checkpoint
    from mwb.core.checkpoint.shards import VOCAB_PARAM

    tensors = {}
    for name, t in model.state_dict().items():
        if name == "head.weight" and model.cfg.tie_embeddings:
            continue
        tensors[name] = (t[:vocab] if VOCAB_PARAM.search(name) else t).detach().clone()
    cfg = RunConfig(model=model.cfg)
    from dataclasses import replace
    cfg = replace(cfg, train=replace(cfg.train, seq_length=seq_length))
    return write_model_checkpoint(directory, cfg, vocab, tensors, extra_files={"tokenizer": tokenizer_path})


PROMPTS = ["The old lighthouse keeper", "Every spring the river"]


def dist_worker(rank: int, world: int, tokenizer_path: str) -> dict:
    """Run under ``run_ranks(…, 2)``: sampling with TP = 2, then LAMBADA/WikiText sharded over DP = 2."""
    from mwb.core.parallel import ParallelDims, build_state
    from mwb.core.tokenizers import load_tokenizer
    from mwb.evaluation.evaluator import evaluate
    from mwb.evaluation.generation import SamplingParams, generate
    from mwb.evaluation.lm import LanguageModel
    from mwb.tasks.api.registry import get_task

    tok = load_tokenizer(tokenizer_path)
    out = {}
    tp = build_state(ParallelDims(world_size=world, tp=world))
    lm = LanguageModel(tiny_gpt(tok.vocab_size, state=tp), tok, state=tp)
    gens = generate(lm, PROMPTS, SamplingParams(max_tokens=12, temperature=0.9, top_k=30, seed=4))
    out["tp_sampled"] = [(g.tokens, g.logprobs) for g in gens]
    out["tp_unseeded"] = [g.tokens for g in generate(lm, PROMPTS, SamplingParams(max_tokens=12, temperature=1.0))]
    out["tp_wiki"] = evaluate(get_task("wikitext")(seq_length=64, overlap=32), lm, state=tp)["metrics"]
    dp = build_state(ParallelDims(world_size=world))
    lm = LanguageModel(tiny_gpt(tok.vocab_size, state=dp), tok, state=dp)
    out["dp_lambada"] = evaluate(get_task("lambada")(batch_size=3), lm, state=dp, records=True)
    out["dp_wiki"] = evaluate(get_task("wikitext")(seq_length=64, overlap=16, batch_size=4), lm, state=dp,
                              records=True)
    return out
