"""Bi-encoder import: a Hugging Face BERT gives the same embeddings as ``transformers.BertModel`` ([CLS] and
mean pooling, with and without the ``bert.`` prefix of task models), an mwb BERT checkpoint feeds both towers,
a saved bi-encoder reloads exactly; and the real all-MiniLM-L6-v2 weights when that package is installed."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from mwb.core.config import RunConfig, update
from mwb.core.parallel.state import single_process_state
from mwb.retrieval.biencoder import RetrievalConfig, build_biencoder
from mwb.retrieval.loading import biencoder_tensors, load_biencoder, write_config_file
from tests.helpers.needs import needs


@pytest.fixture(scope="module")
def hf_bert(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertForMaskedLM(cfg).eval()  # task model: weights under "bert." plus an MLM head
    path = str(tmp_path_factory.mktemp("hf") / "bert")
    model.save_pretrained(path)
    return model.bert, path


def inputs():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 99, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    return tokens, mask


def test_hf_bert_import_matches_transformers(hf_bert):
    ref_model, path = hf_bert
    tokens, mask = inputs()
    with torch.no_grad():
        hidden = ref_model(input_ids=tokens, attention_mask=mask).last_hidden_state
    m = mask[..., None].float()
    for pooling, want in (("cls", hidden[:, 0]), ("mean", (hidden * m).sum(1) / m.sum(1))):
        source, model = load_biencoder(path, rcfg=RetrievalConfig(shared=False, pooling=pooling))
        assert source.kind == "hf" and not source.own_settings
        with torch.no_grad():
            q, c = model(tokens, mask, tokens, mask)  # both towers hold the same BERT
        torch.testing.assert_close(q, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-5)


def test_mwb_bert_and_biencoder_checkpoints(tmp_path):
    from mwb.core.checkpoint import write_model_checkpoint
    from mwb.core.compose import build_model

    cfg = update(RunConfig(), {"model": {"arch": "bert", "num_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
                                         "max_position_embeddings": 32, "dropout": 0.0}})
    bert = build_model(cfg.model, single_process_state(), 50, seed=7).eval()
    tensors = {n: (p.detach()[:50] if n.endswith(("word.weight", "head.weight", "head.bias")) else p.detach())
               for n, p in bert.named_parameters()}
    write_model_checkpoint(str(tmp_path / "bert"), cfg, 50, tensors)
    tokens, mask = torch.randint(0, 50, (2, 9)), torch.ones(2, 9, dtype=torch.long)
    with torch.no_grad():
        want = bert(tokens, padding_mask=mask, return_hidden=True)[0][:, 0]
    source, model = load_biencoder(str(tmp_path / "bert"))
    assert source.kind == "mwb-bert"
    with torch.no_grad():
        torch.testing.assert_close(model.embed_contexts(tokens, mask), want, rtol=1e-5, atol=1e-5)

    # a bi-encoder with separate towers and a projection saves and reloads exactly
    rcfg = RetrievalConfig(projection_dim=8, pooling="mean", normalize=True)
    be = build_biencoder(cfg.model, rcfg, single_process_state(), 50, seed=3).eval()
    write_model_checkpoint(str(tmp_path / "be"), cfg, 50, biencoder_tensors(be),
                           extra_files={"biencoder": write_config_file(rcfg, str(tmp_path))})
    source, again = load_biencoder(str(tmp_path / "be"))
    assert source.kind == "mwb-biencoder" and source.rcfg == rcfg
    with torch.no_grad():
        torch.testing.assert_close(again(tokens, mask, tokens, mask), be(tokens, mask, tokens, mask))


def test_separate_towers_start_identical_and_validate_settings():
    cfg = update(RunConfig(), {"model": {"arch": "bert", "num_layers": 1, "hidden_size": 16, "num_attention_heads": 2}})
    be = build_biencoder(cfg.model, RetrievalConfig(), single_process_state(), 40, seed=1)
    for (a, p), (b, q) in zip(be.query.named_parameters(), be.context.named_parameters()):
        assert a == b and torch.equal(p, q)
    from mwb.core.config import ConfigError
    with pytest.raises(ConfigError):
        RetrievalConfig(pooling="max")
    with pytest.raises(ConfigError):
        RetrievalConfig.from_dict({"pooling": "cls", "bogus": 1})


MINILM = None
try:
    from mwb.retrieval.qa_system import minilm_dir
    MINILM = minilm_dir()
except Exception:  # pragma: no cover
    pass


@needs(models=["minilm-l6"])
def test_real_minilm_weights_match_transformers():
    from mwb.core.tokenizers import load_tokenizer
    from mwb.retrieval.inputs import pad_batch, query_ids

    texts = ["Who wrote Animal Farm?", "Animal Farm is an allegorical novella by George Orwell, published in 1945."]
    hf_tok = transformers.AutoTokenizer.from_pretrained(MINILM)
    enc = hf_tok(texts, padding=True, return_tensors="pt")
    source, model = load_biencoder(MINILM)
    assert source.rcfg.pooling == "mean" and source.rcfg.normalize and source.rcfg.shared
    ids = query_ids(load_tokenizer(source.tokenizer), texts, 64)
    tokens, mask = pad_batch(ids, 0)
    assert torch.equal(torch.as_tensor(tokens), enc["input_ids"])  # same WordPiece ids, [CLS]/[SEP] included
    ref = transformers.BertModel.from_pretrained(MINILM).eval()
    with torch.no_grad():
        h = ref(**enc).last_hidden_state
        m = enc["attention_mask"][..., None].float()
        want = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        got = model.embed_queries(torch.as_tensor(tokens), torch.as_tensor(mask))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert float(got[0] @ got[1]) > 0.5  # the question is close to the passage that answers it
