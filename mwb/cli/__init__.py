"""mwb.cli."""
