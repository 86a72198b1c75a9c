"""mwb.tasks."""
