"""mwb.core.models."""
