"""Real weights: all-MiniLM-L6-v2, a plain ``BertModel`` with no pretraining head. mwb's encoder, read from
the Hugging Face directory directly or from its ``mwb convert`` output, gives the same last hidden states
as ``transformers.BertModel`` (fp32, ≤ 1e-5 relative) on a few sentences."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

from mwb.core.compose import load_full_model  # noqa: E402
from mwb.core.convert import convert  # noqa: E402
from tests.helpers.minilm import minilm_dir  # noqa: E402
from tests.helpers.needs import needs  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Megatron trains transformers in parallel.",
             "A short one.", "Sentence embeddings place similar meanings close together, even in other words."]


@needs(models=["minilm-l6"])
def test_minilm_hidden_states_equal_transformers(tmp_path):
    path = minilm_dir()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    ref = transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        want = ref(**batch)
    _, converted, _ = convert(path, str(tmp_path / "mwb"))
    real = batch["attention_mask"].bool()
    scale = want.last_hidden_state[real].abs().max()
    for source in (path, converted):
        cfg, model, tok_path = load_full_model(source)
        assert not cfg.model.bert_lm_head and cfg.model.bert_pooler and tok_path
        with torch.no_grad():
            hidden, pooled = model(tokens=batch["input_ids"], types=batch["token_type_ids"],
                                   padding_mask=batch["attention_mask"], return_hidden=True)
        rel = ((hidden[real] - want.last_hidden_state[real]).abs().max() / scale).item()
        assert rel <= 1e-5, (source, rel)
        torch.testing.assert_close(pooled, want.pooler_output, rtol=1e-5, atol=1e-5)
