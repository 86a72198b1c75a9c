"""mwb.core.optim."""
