"""Issue 46's closing table: format × architecture × layout → max |Δlogit| of the converted mwb model against
the model the checkpoint came from, by running the same conversions as the tests.

References (code that is not mwb's): transformers' ``GPT2LMHeadModel`` / ``MegatronBertForPreTraining`` for the
Megatron-LM legacy layout (written by tests/helpers/megatron_legacy.py), and megatron-core 0.16's own
``GPTModel`` / ``BertModel`` / ``T5Model`` built on CPU (tests/helpers/megatron_core_ref.py, one subprocess) for the
megatron-core ``torch`` and ``torch_dist`` formats and the NeMo archives and NeMo 2 directory built from
those state dicts (tests/helpers/nemo_ckpt.py). BERT rows
compare the MLM logits at the real (non-padding) tokens, T5 rows the decoder logits. The round-trip rows (mwb → ``--to megatron`` → mwb)
give the max |Δ| over every tensor instead (0 means bit-exact). All fp32 on CPU; nothing here is timed.

    python benchmarks/megatron_logit_table.py        # from the repository root (the reference subprocess
                                                     # imports tests.helpers from the working directory)
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mwb.core.compose import load_full_model  # noqa: E402
from mwb.core.convert import convert, mwb_to_megatron  # noqa: E402
from tests.helpers.megatron_core_ckpt import write_core_torch  # noqa: E402
from tests.helpers.megatron_core_ref import bert_spec, run_reference, t5_spec, tiny_specs  # noqa: E402
from tests.helpers.megatron_legacy import write_bert, write_gpt2  # noqa: E402
from tests.helpers.nemo_ckpt import legacy_nemo, mcore_cfg, nemo2_dir, nemo_tar, redcp, vocab_files  # noqa: E402

V = 101


def _gpt_vocab(d, names=("vocab.json", "merges.txt")) -> None:
    with open(os.path.join(d, names[0]), "w", encoding="utf-8") as f:
        json.dump({chr(33 + i): i for i in range(V)}, f)
    with open(os.path.join(d, names[1]), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


def _bert_vocab(d) -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
    with open(os.path.join(d, "bert-vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")


def _gpt_delta(out: str, tokens: torch.Tensor, ref: torch.Tensor) -> float:
    _, model, _ = load_full_model(out)
    with torch.no_grad():
        return (model(tokens)[..., :V] - ref[..., :V]).abs().max().item()


def _bert_delta(out: str, tokens, types, padding, ref: torch.Tensor) -> float:
    _, model, _ = load_full_model(out)
    with torch.no_grad():
        lm, _ = model(tokens, types=types, padding_mask=padding)
    real = padding.bool() if padding is not None else torch.ones(tokens.shape, dtype=torch.bool)
    return (lm[..., :V][real] - ref[..., :V][real]).abs().max().item()


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64,
                                      bos_token_id=0, eos_token_id=0)).eval()


def legacy_rows(work: Path, gpt2) -> list:
    from transformers import MegatronBertConfig, MegatronBertForPreTraining
    rows = []
    x = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = gpt2(x).logits
    for version, tp, pp in ((0.0, 1, 1), (1.0, 2, 1), (2.0, 4, 1), (3.0, 2, 2), (1.0, 1, 2)):
        save = work / f"legacy-gpt-{version}-{tp}-{pp}"
        write_gpt2(gpt2, str(save), tp=tp, pp=pp, version=version, new_names=pp == 2)
        _gpt_vocab(save)
        _, out, _ = convert(str(save), str(save) + "-mwb")
        rows.append(("Megatron-LM legacy", "GPT-2", f"TP {tp} PP {pp}, checkpoint_version {version:g}",
                     _gpt_delta(out, x, ref)))
    torch.manual_seed(1)
    bert = MegatronBertForPreTraining(MegatronBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                         num_attention_heads=4, intermediate_size=64,
                                                         layer_norm_eps=1e-5, max_position_embeddings=64)).eval()
    types = torch.randint(0, 2, (2, 9), generator=torch.Generator().manual_seed(5))
    xb = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        refb = bert(input_ids=xb, token_type_ids=types).prediction_logits
    for version, tp, pp in ((1.0, 2, 2), (3.0, 4, 1)):
        save = work / f"legacy-bert-{tp}-{pp}"
        write_bert(bert, str(save), tp=tp, pp=pp, version=version, new_names=tp == 4)
        _bert_vocab(save)
        _, out, _ = convert(str(save), str(save) + "-mwb")
        rows.append(("Megatron-LM legacy", "BERT (MLM)", f"TP {tp} PP {pp}, checkpoint_version {version:g}",
                     _bert_delta(out, xb, types, None, refb)))
    return rows


def core_rows(work: Path, gpt2) -> list:
    specs = {**tiny_specs(V, 128, (1, 2), llama_groups=4), "bert": bert_spec(V, 104, seed=5)}
    specs = {n: {**s, "save_dist": str(work / f"dist-{n}")} for n, s in specs.items()}
    refs = run_reference(specs, work)
    arch = {"gpt2like": "GPT-2-like (learned pos, LayerNorm, gelu, MHA, tied)",
            "llamalike": "Llama-like (RoPE, RMSNorm, SwiGLU, GQA 8/4, untied)", "bert": "BERT (MLM)"}
    rows = []

    def delta(name, out):
        r = refs[name]
        if name == "bert":
            return _bert_delta(out, r["tokens"], r["types"], r["padding"], r["logits"])
        return _gpt_delta(out, r["tokens"], r["logits"])

    layouts = {"gpt2like": ((1, 1), (2, 2), (4, 1)), "llamalike": ((1, 1), (2, 1), (4, 1), (2, 2)),
               "bert": ((1, 1), (2, 1), (2, 2))}
    for name, lays in layouts.items():
        for tp, pp in lays:
            save = work / f"core-{name}-{tp}-{pp}"
            write_core_torch(refs[name], specs[name], str(save), tp=tp, pp=pp)
            (_bert_vocab if name == "bert" else lambda d: _gpt_vocab(d, ("gpt2-vocab.json", "gpt2-merges.txt")))(save)
            _, out, _ = convert(str(save), str(save) + "-mwb")
            rows.append(("megatron-core torch", arch[name], f"TP {tp} PP {pp}", delta(name, out)))
    for name in layouts:
        src = specs[name]["save_dist"]
        (_bert_vocab if name == "bert" else lambda d: _gpt_vocab(d, ("gpt2-vocab.json", "gpt2-merges.txt")))(src)
        _, out, _ = convert(src, src + "-mwb")
        rows.append(("megatron-core torch_dist", arch[name], "saved by dist_checkpointing (TP 1)", delta(name, out)))
        if name != "bert":
            rows.append(("mwb → torch_dist → mwb", arch[name], "round trip: max abs Δ over all tensors",
                         _round_trip(out, work / f"rt-{name}")))
    return rows + nemo_rows(work, gpt2, refs, specs, arch, delta)


def nemo_rows(work: Path, gpt2, refs: dict, specs: dict, arch: dict, delta) -> list:
    """NeMo 1 ``.nemo`` archives (legacy keys from GPT-2; megatron-core keys per TP rank; a ``model_weights/``
    distributed checkpoint) and a NeMo 2 directory, as tests/core/convert/test_nemo.py builds them."""
    rows = []
    x = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = gpt2(x).logits
    for tp, gz in ((1, False), (2, True)):
        d = work / f"nemo-legacy-{tp}"
        d.mkdir()
        _, out, _ = convert(legacy_nemo(gpt2, d, tp=tp, gz=gz), str(d / "mwb"))
        rows.append(("NeMo 1 .nemo", "GPT-2 (legacy keys)", f"TP {tp}{', gzipped' if gz else ''}",
                     _gpt_delta(out, x, ref)))
    for name, tp in (("gpt2like", 1), ("gpt2like", 2), ("llamalike", 2)):
        d = work / f"nemo-mcore-{name}-{tp}"
        mlm = write_core_torch(refs[name], specs[name], str(d / "mlm"), tp=tp)
        shards = {}
        for t in range(tp):
            model = torch.load(os.path.join(mlm, f"mp_rank_{t:02d}", "model_optim_rng.pt"), weights_only=False)
            shards["model_weights.ckpt" if tp == 1 else f"mp_rank_{t:02d}/model_weights.ckpt"] = \
                {"model." + k: v for k, v in model["model"].items()}
        src = nemo_tar(str(d / "m.nemo"), mcore_cfg(specs[name], tp), shards, vocab_files())
        _, out, _ = convert(src, str(d / "mwb"))
        rows.append(("NeMo 1 .nemo", arch[name], f"mcore keys, TP {tp}", delta(name, out)))
    d = work / "nemo-dist"
    redcp(os.path.join(specs["gpt2like"]["save_dist"], "release"), str(d / "w"), "model.")
    extra = {f"model_weights/{n}": (d / "w" / n).read_bytes() for n in os.listdir(d / "w")}
    src = nemo_tar(str(d / "d.nemo"), mcore_cfg(specs["gpt2like"], 2), {}, {**vocab_files(), **extra})
    _, out, _ = convert(src, str(d / "mwb"))
    rows.append(("NeMo 1 .nemo", arch["gpt2like"], "model_weights/ distributed checkpoint", delta("gpt2like", out)))
    d = work / "nemo2"
    root = nemo2_dir({**refs["llamalike"], "dist": os.path.join(specs["llamalike"]["save_dist"], "release")},
                     specs["llamalike"], d)
    _, out, _ = convert(root, str(work / "nemo2-mwb"))
    rows.append(("NeMo 2 directory", arch["llamalike"], "weights/ torch_dist", delta("llamalike", out)))
    return rows


def _round_trip(mwb_dir: str, work: Path) -> float:
    mwb_to_megatron(mwb_dir, str(work / "mcore"))
    convert(str(work / "mcore"), str(work / "back"))
    a = load_file(os.path.join(mwb_dir, "shard_00000.safetensors"))
    b = load_file(str(work / "back" / "shard_00000.safetensors"))
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def t5_rows(work: Path) -> list:
    """megatron-core T5 (learned positions): tied (+ head bias) or untied, with or without final norms."""
    specs = {(tied, norms): t5_spec(V, 104, 11, tied, norms) for tied in (True, False) for norms in (True, False)}
    dist = work / "dist-t5"  # the tied model without final norms (Megatron's default, local spec) as torch_dist
    specs[(True, False)] = {**specs[(True, False)], "save_dist": str(dist)}
    refs = run_reference({f"{t}-{n}": s for (t, n), s in specs.items()}, work)
    rows = []

    def delta(r, src, out):
        _bert_vocab(src)
        _, out, _ = convert(str(src), str(out))
        _, model, _ = load_full_model(out)
        with torch.no_grad():
            return (model(r["tokens"], r["dec_tokens"])[..., :V] - r["logits"][..., :V]).abs().max().item()
    for (tied, norms), spec in specs.items():
        r = refs[f"{tied}-{norms}"]
        arch = f"T5 ({'tied + head bias' if tied else 'untied'}, {'final norms' if norms else 'no final norms'})"
        for tp in (1, 2):
            save = work / f"core-t5-{tied}-{norms}-{tp}"
            write_core_torch(r, spec, str(save), tp=tp)
            rows.append(("megatron-core torch", arch, f"TP {tp} PP 1", delta(r, save, str(save) + "-mwb")))
        if "save_dist" in spec:
            rows.append(("megatron-core torch_dist", arch, "saved by dist_checkpointing (TP 1)",
                         delta(r, dist, str(dist) + "-mwb")))
    return rows


def main() -> None:
    print("# Megatron / megatron-core conversions: max |Δlogit| against the source model (fp32, CPU)")
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, load {open('/proc/loadavg').read().split()[0] if os.path.exists('/proc/loadavg') else '?'}")
    with tempfile.TemporaryDirectory(prefix="mwb-logit-table-") as tmp:
        gpt2 = _gpt2()
        rows = legacy_rows(Path(tmp), gpt2) + core_rows(Path(tmp), gpt2) + t5_rows(Path(tmp))
    print("| format | architecture | layout | max abs Δ |")
    print("|---|---|---|---|")
    for fmt, arch, layout, d in rows:
        print(f"| {fmt} | {arch} | {layout} | {d:.2e} |")
    worst = max(d for *_, d in rows)
    print(f"# {len(rows)} rows, worst {worst:.2e} ({'within' if worst < 1e-5 else 'OUTSIDE'} the issue's 1e-5)")


if __name__ == "__main__":
    main()
