"""GPT pretraining: the spec lives in the core trainer package (the trainer's default); re-exported here so
every model family is reached the same way, through :func:`mwb.pretraining.spec_for`."""
from mwb.core.training.model_spec import GPTSpec

__all__ = ["GPTSpec"]
