"""mwb.retrieval."""
