"""BERT: Hugging Face parity (post-norm layout), padding invariance, loss semantics, stage composition."""
from dataclasses import replace

import pytest
import torch

from mwb.core.config import ModelConfig
from mwb.core.models.bert import BertModel
from mwb.core.compose import build_model
from mwb.core.parallel.state import single_process_state

V = 64
CFG = ModelConfig(arch="bert", num_layers=2, hidden_size=32, num_attention_heads=4, ffn_hidden_size=64,
                  max_position_embeddings=32, dropout=0.0, make_vocab_size_divisible_by=32)


def hf_to_mwb(sd: dict, layers: int) -> dict:
    """Hugging Face BertForPreTraining names → mwb BertModel names (the post-norm layout)."""
    m = {"bert.embeddings.word_embeddings.weight": "embed.word.weight",
         "bert.embeddings.position_embeddings.weight": "embed.position.weight",
         "bert.embeddings.token_type_embeddings.weight": "embed.tokentype.weight",
         "bert.pooler.dense.weight": "pooler.dense.weight", "bert.pooler.dense.bias": "pooler.dense.bias",
         "cls.predictions.bias": "head.bias", "cls.predictions.decoder.weight": "head.weight",
         "cls.seq_relationship.weight": "binary_classifier.weight",
         "cls.seq_relationship.bias": "binary_classifier.bias"}
    for p in ("weight", "bias"):
        m[f"bert.embeddings.LayerNorm.{p}"] = f"embed_norm.{p}"
        m[f"cls.predictions.transform.dense.{p}"] = f"lm_transform.dense.{p}"
        m[f"cls.predictions.transform.LayerNorm.{p}"] = f"lm_transform.norm.{p}"
        for i in range(layers):
            hf, mw = f"bert.encoder.layer.{i}.", f"layers.{i}."
            for a, b in (("attention.self.query", "attn.q_proj"), ("attention.self.key", "attn.k_proj"),
                         ("attention.self.value", "attn.v_proj"), ("attention.output.dense", "attn.o_proj"),
                         ("attention.output.LayerNorm", "ln1"), ("intermediate.dense", "mlp.up_proj"),
                         ("output.dense", "mlp.down_proj"), ("output.LayerNorm", "ln2")):
                m[f"{hf}{a}.{p}"] = f"{mw}{b}.{p}"
    return {m[k]: v for k, v in sd.items() if k in m}


def batch(seed=0, b=3, s=12):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (b, s), generator=g)
    types = (torch.arange(s) >= s // 2).long().expand(b, s).clone()
    lengths = torch.tensor([s, s - 3, s - 5])[:b]
    padding = (torch.arange(s)[None] < lengths[:, None]).long()
    loss_mask = ((torch.rand(b, s, generator=g) < 0.3) & padding.bool()).long()
    loss_mask[:, 1] = 1
    labels = torch.where(loss_mask.bool(), torch.randint(0, V, (b, s), generator=g), torch.full_like(tokens, -100))
    nsp = torch.randint(0, 2, (b,), generator=g)
    return tokens, types, padding, labels, loss_mask, nsp


def test_post_norm_matches_hf_bert_for_pretraining():
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32, type_vocab_size=2,
                                     hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(hf_cfg).eval()
    with torch.no_grad():  # make biases and norms non-trivial so a misplaced one shows
        for n, p in hf.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(0.1 * torch.randn_like(p))
    cfg = replace(CFG, bert_post_norm=True, norm_eps=1e-12)
    model = BertModel(cfg, V, V).eval()
    mapped = hf_to_mwb(hf.state_dict(), 2)
    assert set(mapped) == set(model.state_dict())
    model.load_state_dict(mapped)
    tokens, types, padding, labels, loss_mask, nsp = batch()
    with torch.no_grad():
        out = hf(input_ids=tokens, token_type_ids=types, attention_mask=padding, labels=labels,
                 next_sentence_label=nsp)
        lm, binary = model(tokens, types, padding)
        loss_sum, count = model(tokens, types, padding, labels=labels, loss_mask=loss_mask, nsp_labels=nsp)
    real = padding.bool()
    torch.testing.assert_close(lm[real], out.prediction_logits[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(binary, out.seq_relationship_logits, rtol=1e-5, atol=1e-5)
    # HF's loss is mean MLM loss + mean NSP loss: Megatron's semantics, which ours reproduces
    torch.testing.assert_close(loss_sum / count, out.loss, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("post_norm", [False, True])
def test_padding_never_changes_real_positions(post_norm):
    torch.manual_seed(1)
    model = BertModel(replace(CFG, bert_post_norm=post_norm), V, V).eval()
    tokens, types, padding, labels, loss_mask, nsp = batch(seed=2)
    other_tokens = torch.where(padding.bool(), tokens, torch.randint(0, V, tokens.shape))
    other_types = torch.where(padding.bool(), types, 1 - types)
    with torch.no_grad():
        h1, p1 = model(tokens, types, padding, return_hidden=True)
        h2, p2 = model(other_tokens, other_types, padding, return_hidden=True)
        l1 = model(tokens, types, padding, labels=labels, loss_mask=loss_mask, nsp_labels=nsp)
        l2 = model(other_tokens, other_types, padding, labels=labels, loss_mask=loss_mask, nsp_labels=nsp)
    real = padding.bool()
    torch.testing.assert_close(h1[real], h2[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(p1, p2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(l1[0], l2[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(h1[~real], h2[~real])  # the padded inputs did differ


def test_loss_is_mean_lm_plus_mean_binary():
    torch.manual_seed(3)
    model = BertModel(CFG, V, V).eval()
    tokens, types, padding, labels, loss_mask, nsp = batch(seed=4)
    with torch.no_grad():
        lm, binary = model(tokens, types, padding)
        loss_sum, count = model(tokens, types, padding, labels=labels, loss_mask=loss_mask, nsp_labels=nsp)
        lm_only, count2 = model(tokens, types, padding, labels=labels, loss_mask=loss_mask)
    sel = loss_mask.bool()
    lm_mean = torch.nn.functional.cross_entropy(lm[sel], labels[sel])
    nsp_mean = torch.nn.functional.cross_entropy(binary, nsp)
    assert count == sel.sum() == count2
    torch.testing.assert_close(loss_sum / count, lm_mean + nsp_mean)
    torch.testing.assert_close(lm_only / count, lm_mean)


def test_pipeline_stages_compose_to_the_whole_model():
    """Two stages built for a 2-stage layout reproduce the single-stage model (same names, same init,
    the last stage's tied head copy initialised like the embedding)."""
    st = single_process_state()
    cfg = replace(CFG, num_layers=4)
    whole = build_model(cfg, st, V, seed=9)
    first = build_model(cfg, st, V, seed=9, layer_ids=[0, 1], pre_process=True, post_process=False)
    last = build_model(cfg, st, V, seed=9, layer_ids=[2, 3], pre_process=False, post_process=True)
    assert last.shares_embedding and first.shares_embedding and not whole.shares_embedding
    torch.testing.assert_close(last.head.weight, whole.embed.word.weight, rtol=0, atol=0)
    tokens, types, padding, labels, loss_mask, nsp = batch(seed=5)
    kw = dict(padding_mask=padding, labels=labels, loss_mask=loss_mask, nsp_labels=nsp)
    with torch.no_grad():
        ref = whole(tokens, types, **kw)
        hidden = first(tokens, types, padding_mask=padding)
        got = last(hidden=hidden, **kw)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-6, atol=1e-6)
    assert got[1] == ref[1]
