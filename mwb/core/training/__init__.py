"""mwb.core.training."""
