"""Question answering from synthetic data (Puri et al., EMNLP 2020): answer candidates, question generation,
roundtrip filtering, SQuAD-format output, and the open-domain evaluation of readers trained on it."""
from . import question_generation  # noqa: F401  (registers the question-generation fine-tuning task)
