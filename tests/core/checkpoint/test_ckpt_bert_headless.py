"""Encoder checkpoints without a pretraining head: a plain ``transformers.BertModel`` directory (with or
without its pooler) converts to an mwb BERT marked ``bert_lm_head: false`` whose hidden states (and pooled
output) equal Hugging Face's, loads into a fine-tuning task model with nothing but the task head left at
its init, and converts back to a plain ``BertModel``. A tiny random model built offline from a config."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from mwb.core.compose import load_full_model  # noqa: E402
from mwb.core.compose import full_state  # noqa: E402
from mwb.core.convert import convert  # noqa: E402

V = 90


def plain_bert(pooler: bool):
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=V, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg, add_pooling_layer=pooler)
    with torch.no_grad():  # move norms and biases away from their trivial init
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, V, (3, 11), generator=g)
    mask = (torch.arange(11)[None] < torch.tensor([11, 7, 4])[:, None]).long()
    types = (torch.arange(11)[None] >= 5).long().expand(3, -1)
    return ids, mask, types


@pytest.mark.parametrize("pooler", [True, False], ids=["pooler", "no-pooler"])
def test_plain_bert_model_round_trip(tmp_path, pooler):
    model = plain_bert(pooler)
    model.save_pretrained(tmp_path / "hf")
    ids, mask, types = batch()
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    _, out, family = convert(str(tmp_path / "hf"), str(tmp_path / "mwb"))
    cfg, mine, _ = load_full_model(out)
    m = cfg.model
    assert family == "bert" and not m.bert_lm_head and not m.bert_binary_head and m.bert_pooler == pooler
    assert not any(n.startswith(("head", "lm_transform")) for n, _ in mine.named_parameters())
    with torch.no_grad():
        hidden, pooled = mine(tokens=ids, types=types, padding_mask=mask, return_hidden=True)
    real = mask.bool()
    torch.testing.assert_close(hidden[real], ref.last_hidden_state[real], rtol=1e-5, atol=1e-5)
    if pooler:
        torch.testing.assert_close(pooled, ref.pooler_output, rtol=1e-5, atol=1e-5)
    else:
        assert pooled is None
    with pytest.raises(ValueError, match="no masked-LM head"):
        mine(tokens=ids)

    convert(out, str(tmp_path / "back"))
    back = transformers.AutoModel.from_pretrained(tmp_path / "back").eval()
    assert type(back) is transformers.BertModel
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(again.last_hidden_state, ref.last_hidden_state, rtol=0, atol=1e-6)
    if pooler:
        torch.testing.assert_close(again.pooler_output, ref.pooler_output, rtol=0, atol=1e-6)


@pytest.mark.parametrize("pooler", [True, False], ids=["pooler", "no-pooler"])
def test_task_model_loads_everything_but_its_head(tmp_path, pooler):
    """The fine-tuning path: the HF directory read directly fills the whole encoder (the pooler too, when the
    checkpoint has one); only the task head (and a missing pooler) start from their init."""
    from mwb.core.parallel.state import single_process_state
    from mwb.tasks.api.encoder_model import build_task_model, load_weights

    plain_bert(pooler).save_pretrained(tmp_path / "hf")
    cfg, vocab, tensors, _ = full_state(str(tmp_path / "hf"))
    model = build_task_model(cfg.model, single_process_state(), vocab, "multiple_choice", 1, seed=0)
    missing = load_weights(model, tensors, vocab, "hf", encoder_only=True)
    assert missing == ([] if pooler else ["pooler.dense.weight", "pooler.dense.bias"])
    assert not hasattr(model.encoder, "head")
    ids, mask, types = batch()
    logits = model(ids[:, None].expand(-1, 4, -1), types[:, None].expand(-1, 4, -1), mask[:, None].expand(-1, 4, -1))
    assert logits.shape == (3, 4) and torch.isfinite(logits).all()


def test_masked_lm_checkpoints_keep_their_head(tmp_path):
    """Unchanged for checkpoints that have the head: BertForMaskedLM converts with it."""
    cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=V, max_position_embeddings=64)
    transformers.BertForMaskedLM(cfg).save_pretrained(tmp_path / "hf")
    cfg, _, tensors, _ = full_state(str(tmp_path / "hf"))
    assert cfg.model.bert_lm_head and not cfg.model.bert_pooler and "lm_transform.dense.weight" in tensors
