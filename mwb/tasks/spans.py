"""Span extraction helpers for the span tasks (SQuAD, BioASQ): they live in :mod:`mwb.core.data.spans`, shared
with the open-domain QA readers of :mod:`mwb.retrieval.readers`."""
from mwb.core.data.spans import UNIT, context_units, nbest_spans, span_inputs  # noqa: F401
