"""A tiny GPT over a word vocabulary whose chosen tokens' logits are pushed up: the way the empty-output tests
make a model emit the end token (or a line break) first, as a badly trained writer does."""
import re

from mwb.evaluation.lm import LanguageModel
from tests.evaluation.eval_helpers import tiny_gpt

VOCAB = ["<|endoftext|>", "\n", ".", ","] + [f" w{i}" for i in range(60)]
EOD, NEWLINE, WORDS = 0, 1, 4
TOKEN = re.compile(r"<\|endoftext\|>|\n|\.|,| w\d+")


class WordTokenizer:
    """Text → the vocabulary's tokens it contains (anything else is skipped)."""
    vocab_size = len(VOCAB)
    eod = EOD

    def encode(self, text):
        return [VOCAB.index(t) for t in TOKEN.findall(text)]

    def decode(self, ids):
        return "".join(VOCAB[i] for i in ids)


class Biased(LanguageModel):
    """Adds ``bias`` to chosen tokens' logits at every position: +50 on a separator makes it the first token."""

    def __init__(self, model, tok, bias: dict) -> None:
        super().__init__(model, tok)
        self.bias = bias

    def logits(self, tokens, **kw):
        out = super().logits(tokens, **kw)
        for t, b in self.bias.items():
            out[..., t] += b
        return out


def lm(bias=None, max_positions=64):
    """The tiny biased GPT (seeded: the same weights every call)."""
    model = tiny_gpt(len(VOCAB), seed=5, num_layers=2, hidden_size=32, num_attention_heads=4,
                     max_position_embeddings=max_positions).eval()
    return Biased(model, WordTokenizer(), bias or {})
