"""A Hugging Face ``BertForPreTraining`` directory loads with its next-sentence head: the MLM and binary logits of
the loaded mwb model equal transformers' on the same weights (the head used to be mapped to a name the model
does not have, so such a directory could not be loaded at all)."""
import torch
import transformers

from mwb.core.compose import load_full_model


def test_bert_for_pretraining_dir_loads_with_equal_logits(tmp_path):
    cfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(cfg).eval()
    with torch.no_grad():
        hf.cls.seq_relationship.bias.add_(torch.tensor([0.3, -0.2]))
    hf.save_pretrained(tmp_path)
    _, model, _ = load_full_model(str(tmp_path))
    tokens = torch.randint(0, 99, (2, 12), generator=torch.Generator().manual_seed(1))
    types = torch.zeros_like(tokens)
    types[:, 6:] = 1
    padding = torch.ones_like(tokens)
    with torch.no_grad():
        ref = hf(input_ids=tokens, token_type_ids=types, attention_mask=padding)
        lm, binary = model(tokens, types, padding)
    torch.testing.assert_close(lm[..., :99], ref.prediction_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(binary, ref.seq_relationship_logits, rtol=1e-5, atol=1e-5)
