"""mwb.evaluation."""
