"""mwb.pretraining."""
