"""Megatron Workbench: Megatron-style parallel training of transformer LMs, small enough to read."""
__version__ = "0.1.0"
