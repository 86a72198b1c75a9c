"""Session fixtures for the evaluation tests (built once: a tokenizer and a small trained GPT)."""
import json

import pytest
import torch

from .eval_helpers import LAMBADA, memorise, tiny_gpt, train_tokenizer


@pytest.fixture(scope="session")
def eval_tokenizer_path(tmp_path_factory):
    return train_tokenizer(str(tmp_path_factory.mktemp("eval_tok")))


@pytest.fixture(scope="session")
def eval_tokenizer(eval_tokenizer_path):
    from mwb.core.tokenizers import load_tokenizer
    return load_tokenizer(eval_tokenizer_path)


@pytest.fixture(scope="session")
def eval_model(eval_tokenizer):
    """Tiny GPT-2-shaped model, trained for a few steps on the LAMBADA sample (so some answers are right)."""
    torch.manual_seed(0)
    model = tiny_gpt(eval_tokenizer.vocab_size)
    with open(LAMBADA) as f:
        rows = [eval_tokenizer.encode(json.loads(line)["text"]) for line in f]
    memorise(model, rows)
    return model


@pytest.fixture(scope="session")
def eval_lm(eval_model, eval_tokenizer):
    from mwb.evaluation.lm import LanguageModel
    return LanguageModel(eval_model, eval_tokenizer)
